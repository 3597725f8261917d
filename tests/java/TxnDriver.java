// A consume-transform-produce step with the Java client (issue 29): the consumer's offsets sent
// into the producer's transaction with KafkaProducer.sendOffsetsToTransaction(offsets,
// consumer.groupMetadata()) (KIP-447: TxnOffsetCommit v3+ with generation and member id).
//
// Args: --bootstrap HOST:PORT --group G --input T --output T --transactional-id ID
// Reads 5 records of --input (partition 0) in group G, then runs two transactions: one that
// writes "committed" to --output with offset 5 and commits, one that writes "aborted" with
// offset 7 and aborts. After each it reads the group's committed offset (KafkaConsumer.committed,
// require_stable under read_committed). Prints one JSON object per line on stdout:
//   {"event":"started"}
//   {"step":"committed","committed":N}     N: the group's offset of partition 0 (-1: none)
//   {"step":"aborted","committed":N}
//   {"event":"error","error":"..."}         then exits 1
//   {"event":"closed"}

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnDriver {
    private static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String quoted(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        c.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.get("transactional-id"));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        emit("{\"event\":\"started\"}");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            String input = args.get("input");
            consumer.subscribe(List.of(input));
            long deadline = System.currentTimeMillis() + 60_000;
            int read = 0;
            while (read < 5) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("read " + read + " of 5 records");
                }
                read += consumer.poll(Duration.ofMillis(200)).count();
            }
            producer.initTransactions();
            TopicPartition tp = new TopicPartition(input, 0);
            step(producer, consumer, tp, args.get("output"), "committed", 5, true);
            step(producer, consumer, tp, args.get("output"), "aborted", 7, false);
        } catch (Exception e) {
            emit("{\"event\":\"error\",\"error\":" + quoted(String.valueOf(e)) + "}");
            System.exit(1);
        }
        emit("{\"event\":\"closed\"}");
    }

    private static void step(KafkaProducer<byte[], byte[]> producer,
            KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp, String output, String key,
            long offset, boolean commit) {
        producer.beginTransaction();
        producer.send(new ProducerRecord<>(output, 0, key.getBytes(), "v".getBytes()));
        producer.flush();
        producer.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(offset)),
                consumer.groupMetadata());
        if (commit) {
            producer.commitTransaction();
        } else {
            producer.abortTransaction();
        }
        Map<TopicPartition, OffsetAndMetadata> committed =
                consumer.committed(Set.of(tp), Duration.ofSeconds(20));
        OffsetAndMetadata got = committed.get(tp);
        emit("{\"step\":" + quoted(key) + ",\"committed\":" + (got == null ? -1 : got.offset())
                + "}");
    }
}
