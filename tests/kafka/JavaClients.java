// Kafka's own Java client (4.x, its defaults: an idempotent producer with
// acks=all) against ringlog's Kafka listener: produce COUNT records over
// the topic's partitions, read them back with assign/seekToBeginning, seek
// into the middle of a batch, look an offset up by time, and print one
// line per finding for tests/tests/it/kafka_listener.rs to check.
//
// java -cp "$KAFKA_HOME/libs/*" JavaClients.java BOOTSTRAP TOPIC COUNT [USER PASSWORD]
// (with a user: SASL/SCRAM-SHA-256 on every connection)
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClients {
    /// The login every client is configured with (none: plain).
    static final Properties login = new Properties();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        if (args.length == 5) {
            login.put("security.protocol", "SASL_PLAINTEXT");
            login.put("sasl.mechanism", "SCRAM-SHA-256");
            login.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"" + args[3] + "\" password=\"" + args[4] + "\";");
        }
        long before = System.currentTimeMillis();

        Properties p = new Properties();
        p.putAll(login);
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        List<RecordMetadata> sent = new ArrayList<>();
        int partitions;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            partitions = producer.partitionsFor(topic).size();
            List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i);
                r.headers().add("n", Integer.toString(i).getBytes());
                futures.add(producer.send(r));
            }
            producer.flush();
            for (var f : futures) sent.add(f.get());
        }
        System.out.println("produced " + sent.size() + " partitions " + partitions);

        Properties c = new Properties();
        c.putAll(login);
        c.put("bootstrap.servers", bootstrap);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("enable.auto.commit", "false");
        c.put("max.poll.records", "7");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<Integer, Integer> last = new HashMap<>();
            int read = 0, outOfOrder = 0, wrongOffset = 0, badHeader = 0;
            long deadline = System.currentTimeMillis() + 30000;
            while (read < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    int n = Integer.parseInt(r.value().substring(1));
                    Integer prev = last.put(r.partition(), n);
                    if (prev != null && n <= prev) outOfOrder++;
                    if (sent.get(n).offset() != r.offset()) wrongOffset++;
                    if (!new String(r.headers().lastHeader("n").value()).equals(Integer.toString(n))) badHeader++;
                    read++;
                }
            }
            System.out.println("consumed " + read + " out_of_order " + outOfOrder + " wrong_offset " + wrongOffset + " bad_header " + badHeader);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            boolean atEnd = true;
            for (TopicPartition tp : tps) atEnd &= consumer.position(tp) == ends.get(tp);
            System.out.println("positions_at_end " + atEnd);

            // Into the middle of a batch: the third record of partition 0.
            RecordMetadata third = sent.get(2 * partitions);
            TopicPartition zero = new TopicPartition(topic, 0);
            consumer.seek(zero, third.offset());
            ConsumerRecord<String, String> first = null;
            while (first == null && System.currentTimeMillis() < deadline + 10000) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    if (first == null && r.partition() == 0) first = r;
                }
            }
            System.out.println("seek " + third.offset() + " first " + (first == null ? -1 : first.offset()) + " value " + (first == null ? "" : first.value()));

            Map<TopicPartition, OffsetAndTimestamp> byTime = consumer.offsetsForTimes(Map.of(zero, before));
            OffsetAndTimestamp found = byTime.get(zero);
            System.out.println("by_time " + (found == null ? -1 : found.offset()) + " first_offset " + sent.get(0).offset());
        }

        // A fetch maximum below a batch's size (KIP-74): the broker sends
        // the first batch whole, so this consumer still reads every record.
        c.put("max.partition.fetch.bytes", "100");
        c.put("fetch.max.bytes", "100");
        c.put("max.poll.records", "500");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            TopicPartition zero = new TopicPartition(topic, 0);
            consumer.assign(List.of(zero));
            consumer.seekToBeginning(List.of(zero));
            long want = sent.stream().filter(m -> m.partition() == 0).count();
            long read = 0;
            String failure = "none";
            long deadline = System.currentTimeMillis() + 30000;
            try {
                while (read < want && System.currentTimeMillis() < deadline) {
                    read += consumer.poll(Duration.ofMillis(200)).count();
                }
            } catch (Exception e) {
                failure = e.getClass().getSimpleName();
            }
            System.out.println("small_fetch read " + read + " of " + want + " failure " + failure);
        }
        admin(bootstrap, topic + "-admin");
    }

    // AdminClient: create a topic (three partitions, a retention), again
    // (it exists), describe its configs, raise its partitions to five (and
    // try to lower them), create one with a config ringlog has not
    // (refused, named), and delete the first.
    static void admin(String bootstrap, String name) throws Exception {
        Properties a = new Properties();
        a.putAll(login);
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(name, 3, (short) -1).configs(Map.of("retention.ms", "3600000")))).all().get();
            int partitions = admin.describeTopics(List.of(name)).allTopicNames().get().get(name).partitions().size();
            System.out.println("admin created " + name + " partitions " + partitions);
            // Metadata v10+: the topic's id; v12: the topic asked for by it.
            Uuid id = admin.describeTopics(List.of(name)).allTopicNames().get().get(name).topicId();
            System.out.println("admin topic id " + (Uuid.ZERO_UUID.equals(id) ? "zero" : "set"));
            String byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get().get(id).name();
            System.out.println("admin by id " + byId);
            System.out.println("admin again " + failure(() -> admin.createTopics(List.of(new NewTopic(name, 3, (short) -1))).all().get()));
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, name);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            System.out.println("admin config retention.ms " + config.get("retention.ms").value() + " " + config.get("retention.ms").source() + " cleanup.policy " + config.get("cleanup.policy").value() + " " + config.get("cleanup.policy").source());
            admin.createPartitions(Map.of(name, NewPartitions.increaseTo(5))).all().get();
            int raised = admin.describeTopics(List.of(name)).allTopicNames().get().get(name).partitions().size();
            System.out.println("admin raised " + name + " partitions " + raised);
            System.out.println("admin lower " + failure(() -> admin.createPartitions(Map.of(name, NewPartitions.increaseTo(2))).all().get()));
            System.out.println("admin compact " + failure(() -> admin.createTopics(List.of(new NewTopic(name + "-c", 1, (short) -1).configs(Map.of("cleanup.policy", "compact")))).all().get()));
            admin.deleteTopics(List.of(name)).all().get();
            System.out.println("admin deleted " + name + " listed " + admin.listTopics().names().get().contains(name));
        }
    }

    interface Action { void run() throws Exception; }

    static String failure(Action action) {
        try {
            action.run();
            return "none";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }
}
