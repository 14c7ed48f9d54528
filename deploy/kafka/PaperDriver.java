// loadgen's driver for Apache Kafka: the paper's experiments through
// Kafka's own Java client (kafka-clients 4.4.0), which loadgen runs as a
// process and reads. Compiled by `deploy/peers.sh install kafka`.
//
//   PaperDriver produce BOOTSTRAP TOPIC MESSAGES SIZE BATCH ACKS
//   PaperDriver consume BOOTSTRAP TOPIC MESSAGES
//   PaperDriver delete  BOOTSTRAP TOPIC...
//
// Standard output, one word and a number a line: `ready` once connected
// (the topic made, the client warmed up: loadgen starts its clock there),
// `count N` every 100 ms (messages acknowledged, or read), `done N` at the
// end. Failures go to standard error and exit 1.

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class PaperDriver {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            usage();
        }
        switch (args[0]) {
            case "produce" -> {
                if (args.length != 7) usage();
                produce(args[1], args[2], Long.parseLong(args[3]), Integer.parseInt(args[4]),
                        Integer.parseInt(args[5]), args[6]);
            }
            case "consume" -> {
                if (args.length != 4) usage();
                consume(args[1], args[2], Long.parseLong(args[3]));
            }
            case "delete" -> {
                List<String> topics = new ArrayList<>();
                for (int i = 2; i < args.length; i++) topics.add(args[i]);
                try (Admin admin = Admin.create(admin(args[1]))) {
                    admin.deleteTopics(topics).all().get();
                }
            }
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: PaperDriver produce BOOTSTRAP TOPIC MESSAGES SIZE BATCH ACKS"
                + " | consume BOOTSTRAP TOPIC MESSAGES | delete BOOTSTRAP TOPIC...");
        System.exit(2);
    }

    private static Properties admin(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    /// One partition of one copy, as the paper's single-partition runs.
    private static void createTopic(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(admin(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) throw e;
        }
    }

    /// Prints `count N` every 100 ms until stopped.
    private static Thread reporter(AtomicLong count) {
        Thread t = new Thread(() -> {
            try {
                while (!Thread.currentThread().isInterrupted()) {
                    Thread.sleep(100);
                    System.out.println("count " + count.get());
                    System.out.flush();
                }
            } catch (InterruptedException e) {
                // stopped
            }
        });
        t.setDaemon(true);
        return t;
    }

    /// BATCH 1: batching off (`batch.size=0`, every record its own
    /// request, pipelined up to the connection's in-flight limit); BATCH n:
    /// room for n records per request and a 5 ms linger to fill it. ACKS
    /// as Kafka's `acks` (0 answers nothing, as ringlog's acks none).
    private static void produce(String bootstrap, String topic, long messages, int size, int batch,
            String acks) throws Exception {
        createTopic(bootstrap, topic);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", acks);
        p.put("enable.idempotence", "false");
        p.put("compression.type", "none");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        if (batch <= 1) {
            p.put("batch.size", "0");
            p.put("linger.ms", "0");
        } else {
            // A record in a v2 batch: its value, a varint header of about
            // 8 bytes; the batch's own 61-byte header.
            p.put("batch.size", Integer.toString(61 + batch * (size + 8)));
            p.put("linger.ms", "5");
        }
        p.put("buffer.memory", Long.toString(256L << 20));
        AtomicLong acked = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        // Incompressible payloads, each different (xorshift64).
        long state = 0x9e3779b97f4a7c15L;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            // Warm up the connection and metadata before the clock starts.
            producer.partitionsFor(topic);
            System.out.println("ready");
            System.out.flush();
            Thread report = reporter(acked);
            report.start();
            for (long i = 0; i < messages && failed.get() == null; i++) {
                byte[] value = new byte[size];
                for (int j = 0; j < size; j += 8) {
                    state ^= state << 13;
                    state ^= state >>> 7;
                    state ^= state << 17;
                    for (int k = 0; k < 8 && j + k < size; k++) value[j + k] = (byte) (state >>> (8 * k));
                }
                producer.send(new ProducerRecord<>(topic, 0, null, value), (metadata, e) -> {
                    if (e != null) failed.compareAndSet(null, e);
                    else acked.incrementAndGet();
                });
            }
            producer.flush();
            report.interrupt();
        }
        if (failed.get() != null) {
            System.err.println("producing to " + topic + " failed: " + failed.get());
            System.exit(1);
        }
        System.out.println("done " + acked.get());
    }

    private static void consume(String bootstrap, String topic, long messages) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("max.poll.records", "10000");
        AtomicLong read = new AtomicLong();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(Collections.singletonList(partition));
            consumer.seekToBeginning(Collections.singletonList(partition));
            consumer.position(partition);
            System.out.println("ready");
            System.out.flush();
            Thread report = reporter(read);
            report.start();
            long idle = 0;
            while (read.get() < messages) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(java.time.Duration.ofMillis(500));
                if (records.isEmpty()) {
                    if (++idle > 60) {
                        System.err.println("consuming " + topic + ": nothing for 30 s at " + read.get()
                                + " of " + messages + " messages");
                        System.exit(1);
                    }
                    continue;
                }
                idle = 0;
                long n = 0;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    n += r.value() == null ? 0 : 1;
                }
                read.addAndGet(n);
            }
            report.interrupt();
        }
        System.out.println("done " + read.get());
    }
}
