// Kafka's own record classes reading bytes ringlog stored: the batches of a
// file, each checked (`ensureValid`: magic, CRC-32C, record count) and each
// record printed as `OFFSET TIME KEY VALUE HEADERS`, one per line, after a
// `batch BASE LAST CODEC COUNT TIMESTAMPTYPE` line.
//
// Run as a single-file program against Kafka's jars (tests/tests/it/
// format_two.rs does): java -cp "$KAFKA_HOME/libs/*" ReadBatches.java FILE
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.utils.Utils;

public class ReadBatches {
    public static void main(String[] args) throws Exception {
        byte[] bytes = Files.readAllBytes(Paths.get(args[0]));
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(bytes));
        StringBuilder out = new StringBuilder();
        for (MutableRecordBatch batch : records.batches()) {
            batch.ensureValid();
            out.append("batch ").append(batch.baseOffset()).append(' ')
                .append(batch.lastOffset()).append(' ').append(batch.compressionType()).append(' ')
                .append(batch.countOrNull()).append(' ').append(batch.timestampType()).append('\n');
            for (org.apache.kafka.common.record.internal.Record r : batch) {
                r.ensureValid();
                out.append(r.offset()).append(' ').append(r.timestamp()).append(' ')
                    .append(text(r.hasKey() ? Utils.toArray(r.key()) : null)).append(' ')
                    .append(text(r.hasValue() ? Utils.toArray(r.value()) : null)).append(' ');
                for (Header h : r.headers()) {
                    out.append(h.key()).append('=').append(text(h.value())).append(';');
                }
                out.append('\n');
            }
        }
        System.out.print(out);
    }

    private static String text(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }
}
