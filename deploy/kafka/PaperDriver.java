// loadgen's driver for Apache Kafka: the paper's experiments through
// Kafka's own Java client (kafka-clients 4.4.0), which loadgen runs as a
// process and reads. Compiled by `deploy/peers.sh install kafka`.
//
//   PaperDriver create   BOOTSTRAP TOPIC PARTITIONS REPLICAS [CONFIG=VALUE...]
//   PaperDriver produce  BOOTSTRAP TOPIC MESSAGES SIZE BATCH ACKS
//   PaperDriver consume  BOOTSTRAP TOPIC MESSAGES
//   PaperDriver paced    BOOTSTRAP TOPIC RATE SECONDS WARMUP SIZE ACKS
//   PaperDriver failover BOOTSTRAP TOPIC
//   PaperDriver leader   BOOTSTRAP TOPIC PARTITION
//   PaperDriver delete   BOOTSTRAP TOPIC...
//
// Standard output, one word and numbers a line: `ready` once connected
// (the topic made, the client warmed up: loadgen starts its clock there),
// `count N` every 100 ms (messages acknowledged, or read), `done N` at the
// end, `cpu NANOS` (this JVM's CPU time) before it. `paced` adds
// `publish`/`e2e` percentile lines, `failover` an `ok SENT ANSWERED` line
// per answered send, `leader` the partition leader's node id. Failures go
// to standard error and exit 1.

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
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
                        args[5], args[6]);
            }
            case "consume" -> {
                if (args.length != 4) usage();
                consume(args[1], args[2], Long.parseLong(args[3]));
            }
            case "create" -> {
                if (args.length < 5) usage();
                Map<String, String> configs = new HashMap<>();
                for (int i = 5; i < args.length; i++) {
                    String[] kv = args[i].split("=", 2);
                    if (kv.length != 2) usage();
                    configs.put(kv[0], kv[1]);
                }
                create(args[1], args[2], Integer.parseInt(args[3]), Short.parseShort(args[4]), configs);
            }
            case "paced" -> {
                if (args.length != 8) usage();
                paced(args[1], args[2], Double.parseDouble(args[3]), Double.parseDouble(args[4]),
                        Double.parseDouble(args[5]), Integer.parseInt(args[6]), args[7]);
            }
            case "failover" -> failover(args[1], args[2]);
            case "leader" -> {
                if (args.length != 4) usage();
                try (Admin admin = Admin.create(admin(args[1]))) {
                    TopicDescription d = admin.describeTopics(List.of(args[2])).allTopicNames().get().get(args[2]);
                    var partition = d.partitions().get(Integer.parseInt(args[3]));
                    System.out.println("leader " + (partition.leader() == null ? -1 : partition.leader().id())
                            + " isr " + partition.isr().size());
                }
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
        System.err.println("usage: PaperDriver produce BOOTSTRAP TOPIC MESSAGES SIZE BATCH|defaults ACKS"
                + " | consume BOOTSTRAP TOPIC MESSAGES"
                + " | create BOOTSTRAP TOPIC PARTITIONS REPLICAS [CONFIG=VALUE...]"
                + " | paced BOOTSTRAP TOPIC RATE SECONDS WARMUP SIZE ACKS"
                + " | failover BOOTSTRAP TOPIC | leader BOOTSTRAP TOPIC PARTITION"
                + " | delete BOOTSTRAP TOPIC...");
        System.exit(2);
    }

    private static Properties admin(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    /// One partition of one copy, as the paper's single-partition runs,
    /// unless `create` made the topic first.
    private static void createTopic(String bootstrap, String topic) throws Exception {
        create(bootstrap, topic, 1, (short) 1, Map.of());
    }

    private static void create(String bootstrap, String topic, int partitions, short replicas,
            Map<String, String> configs) throws Exception {
        try (Admin admin = Admin.create(admin(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replicas).configs(configs))).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) throw e;
        }
    }

    /// This JVM's CPU time so far, in nanoseconds.
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    private static Properties producerSettings(String bootstrap, String acks) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", acks);
        p.put("enable.idempotence", "false");
        p.put("compression.type", "none");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    private static Properties consumerSettings(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("max.poll.records", "10000");
        return p;
    }

    /// Every partition of `topic`, from the start (or from the end: only
    /// what is produced from now on).
    private static List<TopicPartition> assignAll(KafkaConsumer<byte[], byte[]> consumer, String topic,
            boolean fromEnd) {
        List<TopicPartition> partitions = new ArrayList<>();
        consumer.partitionsFor(topic).forEach(info -> partitions.add(new TopicPartition(topic, info.partition())));
        consumer.assign(partitions);
        if (fromEnd) consumer.seekToEnd(partitions);
        else consumer.seekToBeginning(partitions);
        partitions.forEach(consumer::position);
        return partitions;
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
    /// room for n records per request and a 5 ms linger to fill it;
    /// `defaults`: Kafka's own producer settings, untouched (acks=all,
    /// idempotence on, 16 KiB batches, 5 ms linger in Kafka 4), ACKS
    /// ignored. ACKS as Kafka's `acks` (0 answers nothing, as ringlog's acks
    /// none). Records go to the topic's partitions in turn.
    private static void produce(String bootstrap, String topic, long messages, int size, String batchArg,
            String acks) throws Exception {
        createTopic(bootstrap, topic);
        Properties p;
        int batch = batchArg.equals("defaults") ? -1 : Integer.parseInt(batchArg);
        if (batch < 0) {
            p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
        } else {
            p = producerSettings(bootstrap, acks);
        }
        if (batch < 0) {
            // Kafka's defaults, as a user who changes nothing gets them.
        } else if (batch <= 1) {
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
        // At most this many records unanswered: the client's buffer.memory
        // bounds bytes, not records, and a record a request costs far more
        // heap than its bytes (10 M queued records exhausted a 1 GiB heap).
        java.util.concurrent.Semaphore window = new java.util.concurrent.Semaphore(100_000);
        // Incompressible payloads, each different (xorshift64).
        long state = 0x9e3779b97f4a7c15L;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            // Warm up the connection and metadata before the clock starts.
            int partitions = producer.partitionsFor(topic).size();
            System.out.println("ready " + cpuNanos());
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
                window.acquireUninterruptibly();
                producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null, value), (metadata, e) -> {
                    window.release();
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
        System.out.println("cpu " + cpuNanos());
        System.out.println("done " + acked.get());
    }

    private static void consume(String bootstrap, String topic, long messages) {
        AtomicLong read = new AtomicLong();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerSettings(bootstrap))) {
            assignAll(consumer, topic, false);
            System.out.println("ready " + cpuNanos());
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
        System.out.println("cpu " + cpuNanos());
        System.out.println("done " + read.get());
    }

    /// Prints `NAME count avg p50 p95 p99 p999 max` in microseconds over
    /// the recorded (non-negative) samples of `values`.
    private static void percentiles(String name, long[] values) {
        long[] v = Arrays.stream(values).filter(x -> x >= 0).sorted().toArray();
        if (v.length == 0) {
            System.out.println(name + " 0");
            return;
        }
        double sum = 0;
        for (long x : v) sum += x;
        StringBuilder line = new StringBuilder(name + " " + v.length + " " + (long) (sum / v.length / 1000));
        for (double q : new double[] {0.50, 0.95, 0.99, 0.999}) {
            line.append(' ').append(v[(int) Math.min(v.length - 1, Math.ceil(q * v.length) - 1)] / 1000);
        }
        line.append(' ').append(v[v.length - 1] / 1000);
        System.out.println(line);
    }

    /// A producer at RATE messages/s for SECONDS (0: as fast as it goes)
    /// and a consumer of every partition, in this JVM. Each value carries
    /// its intended send time (System.nanoTime: one clock for both ends)
    /// and its sequence number; publish latency runs from the intended
    /// time to the acknowledgement, end-to-end latency to the consumer's
    /// receipt, so a stall counts against every message it delayed (as
    /// loadgen's own e2e). The first WARMUP seconds are not counted.
    /// Prints `publish`/`e2e` percentile lines, `lost`, `duplicated`,
    /// `achieved` (messages/s received after the warm-up).
    private static void paced(String bootstrap, String topic, double rate, double seconds, double warmup,
            int size, String acks) throws Exception {
        createTopic(bootstrap, topic);
        Properties p = producerSettings(bootstrap, acks);
        // A message goes as soon as it is due (no linger); while a request
        // is in flight the next ones gather in a batch, as loadgen's.
        p.put("linger.ms", "0");
        int n = (int) Math.min(Integer.MAX_VALUE - 8, rate > 0 ? Math.ceil(rate * seconds) : 10_000_000);
        long[] publish = new long[n];
        long[] e2e = new long[n];
        Arrays.fill(publish, -1);
        Arrays.fill(e2e, -1);
        long[] due = new long[n];
        AtomicLong received = new AtomicLong();
        AtomicLong duplicated = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        java.util.concurrent.atomic.AtomicBoolean producing = new java.util.concurrent.atomic.AtomicBoolean(true);
        AtomicLong sentCount = new AtomicLong();
        AtomicLong lastReceipt = new AtomicLong();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
                KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerSettings(bootstrap))) {
            int partitions = producer.partitionsFor(topic).size();
            assignAll(consumer, topic, true);
            long start = System.nanoTime() + 100_000_000L;
            long counted = start + (long) (warmup * 1e9);
            long end = start + (long) (seconds * 1e9);
            Thread reader = new Thread(() -> {
                long quiet = 0;
                while (true) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(java.time.Duration.ofMillis(100));
                    long now = System.nanoTime();
                    if (!records.isEmpty()) lastReceipt.set(now);
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        ByteBuffer b = ByteBuffer.wrap(r.value());
                        long intended = b.getLong();
                        int seq = (int) b.getLong();
                        if (seq < 0 || seq >= n) continue;
                        if (e2e[seq] >= 0) {
                            duplicated.incrementAndGet();
                        } else {
                            e2e[seq] = intended >= counted ? now - intended : -2;
                            received.incrementAndGet();
                        }
                    }
                    if (!producing.get() && received.get() >= sentCount.get()) break;
                    quiet = records.isEmpty() && !producing.get() ? quiet + 1 : 0;
                    if (quiet > 300) break; // 30 s with nothing after the last send
                }
            });
            System.out.println("ready " + cpuNanos());
            System.out.flush();
            reader.start();
            Thread report = reporter(received);
            report.start();
            int i = 0;
            while (i < n && failed.get() == null) {
                long intended = rate > 0 ? start + (long) (i * 1e9 / rate) : System.nanoTime();
                if (intended >= end) break;
                // Sleep until due, never spin: a spinning core on a
                // two-core machine is taken from the brokers measured (as
                // loadgen's own pacing; under 50 us the send goes now).
                long wait = intended - System.nanoTime();
                if (wait > 50_000) LockSupport.parkNanos(wait);
                if (rate <= 0 && intended >= end) break;
                byte[] value = new byte[size];
                ByteBuffer.wrap(value).putLong(intended).putLong(i);
                due[i] = intended;
                final int seq = i;
                producer.send(new ProducerRecord<>(topic, i % partitions, null, value), (metadata, e) -> {
                    if (e != null) failed.compareAndSet(null, e);
                    else publish[seq] = due[seq] >= counted ? System.nanoTime() - due[seq] : -2;
                });
                i++;
                if (rate <= 0 && System.nanoTime() >= end) break;
            }
            producer.flush();
            sentCount.set(i);
            producing.set(false);
            reader.join();
            report.interrupt();
            long countedSent = 0;
            long countedReceived = 0;
            for (int k = 0; k < i; k++) {
                if (due[k] >= counted) {
                    countedSent++;
                    if (e2e[k] >= 0) countedReceived++;
                }
            }
            // Received after the warm-up, over the time until the last of
            // them arrived: a system that falls behind the rate shows it.
            double window = (Math.max(lastReceipt.get(), end) - counted) / 1e9;
            percentiles("publish", publish);
            percentiles("e2e", e2e);
            System.out.println("lost " + (countedSent - countedReceived));
            System.out.println("duplicated " + duplicated.get());
            System.out.println("achieved " + (long) (countedReceived / Math.max(window, 1e-3)));
            System.out.println("cpu " + cpuNanos());
            System.out.println("done " + received.get());
        }
        if (failed.get() != null) {
            System.err.println("producing to " + topic + " failed: " + failed.get());
            System.exit(1);
        }
    }

    /// A synchronous acks=all producer (Kafka's defaults otherwise:
    /// idempotent, retrying up to its delivery timeout) sending one record
    /// to partition 0 every 2 ms, printing `ok SENT ANSWERED` (epoch
    /// microseconds) for each answered send, until standard input closes.
    private static void failover(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {}
            } catch (java.io.IOException e) {
                // closed
            }
            stop.set(true);
        });
        watcher.setDaemon(true);
        watcher.start();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.partitionsFor(topic);
            System.out.println("ready " + cpuNanos());
            System.out.flush();
            while (!stop.get()) {
                long sent = epochMicros();
                try {
                    producer.send(new ProducerRecord<>(topic, 0, null, "failover".getBytes())).get();
                    System.out.println("ok " + sent + " " + epochMicros());
                    System.out.flush();
                } catch (ExecutionException e) {
                    // The gap being measured; the client retries within
                    // its delivery timeout before it gives up on a record.
                }
                Thread.sleep(2);
            }
        }
    }

    private static long epochMicros() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }
}
