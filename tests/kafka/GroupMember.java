// One member of a Kafka consumer group, with the Java client's defaults
// (the classic protocol, auto-commit) but max.poll.records=7, so commits
// land inside batches, and a pause after each poll, so a group of mixed
// clients is still reading when the test kills one. Prints "assigned
// P,P,…" at each assignment and "r PARTITION OFFSET VALUE" per record.
//
// java -cp "$KAFKA_HOME/libs/*" GroupMember.java BOOTSTRAP TOPIC GROUP
import java.time.Duration;
import java.util.*;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class GroupMember {
    public static void main(String[] args) throws Exception {
        Properties c = new Properties();
        c.put("bootstrap.servers", args[0]);
        c.put("group.id", args[2]);
        c.put("client.id", "java-member");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("auto.offset.reset", "earliest");
        c.put("auto.commit.interval.ms", "500");
        c.put("max.poll.records", "7");
        c.put("session.timeout.ms", "10000");
        c.put("heartbeat.interval.ms", "1000");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(args[1]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> revoked) {}
                public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                    System.out.println("assigned " + assigned.stream().map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(",")));
                    System.out.flush();
                }
            });
            while (true) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("r " + r.partition() + " " + r.offset() + " " + r.value());
                }
                System.out.flush();
                Thread.sleep(10);
            }
        }
    }
}
