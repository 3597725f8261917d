// Kafka's own KafkaShareConsumer (KIP-932) as a scripted share-group member, for the share tests.
// Same contract as tests/clients/share_driver.py (read its docstring), in short:
//
// Args: --bootstrap HOST:PORT --group G --topic T --client-id C
//       [--max-poll-records N] [--commit sync|async] [--work-ms N]
// Explicit acknowledgement: every polled record is acknowledged one by one (ACCEPT unless a rule
// says otherwise), then the batch is committed (commitSync, or commitAsync) before the next poll;
// --work-ms: the time each non-empty batch is "processed" before its acknowledgements.
// stdin: "rule P:O A1,A2,..." (action per delivery count, the last repeats; accept|release|reject),
//        "hold" (leave the next non-empty poll's records unacknowledged and stop polling),
//        "close" or EOF (close the consumer, exit 0).
// stdout, one JSON object a line:
//   {"event":"started"}
//   {"event":"records","records":[[P,O,deliveryCount,"accept|release|reject|hold"],...]}
//   {"event":"committed","partitions":N,"errors":[...]}
//   {"event":"holding"}
//   {"event":"told","line":"..."} (a script line is in force from now on)
//   {"event":"error","where":"poll|commit|acknowledge","error":"..."}
//   {"event":"closed"}

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ShareDriver {
    private static final Map<String, AcknowledgeType> ACTIONS = Map.of(
            "accept", AcknowledgeType.ACCEPT,
            "release", AcknowledgeType.RELEASE,
            "reject", AcknowledgeType.REJECT);

    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static final Map<String, String[]> RULES = new ConcurrentHashMap<>();
    private static final AtomicBoolean HOLD = new AtomicBoolean(false);
    private static final CountDownLatch CLOSING = new CountDownLatch(1);

    private static String action(int partition, long offset, int deliveryCount) {
        String[] steps = RULES.get(partition + ":" + offset);
        if (steps == null || steps.length == 0) {
            return "accept";
        }
        return steps[Math.min(Math.max(deliveryCount, 1), steps.length) - 1];
    }

    private static void readStdin() {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
            String line;
            while ((line = r.readLine()) != null) {
                String[] words = line.trim().split("\\s+");
                if (words.length == 1 && words[0].equals("close")) {
                    break;
                }
                if (words.length == 1 && words[0].equals("hold")) {
                    HOLD.set(true);
                } else if (words.length == 3 && words[0].equals("rule")) {
                    RULES.put(words[1], words[2].split(","));
                }
                emit("{\"event\":\"told\",\"line\":" + str(line.trim()) + "}");
            }
        } catch (Exception e) {
            // EOF or a broken pipe both mean: close.
        }
        CLOSING.countDown();
    }

    private static String errors(Map<TopicIdPartition, Optional<KafkaException>> result) {
        List<String> out = new ArrayList<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
            e.getValue().ifPresent(x -> out.add(str(e.getKey() + ": " + x)));
        }
        return "[" + String.join(",", out) + "]";
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, args.getOrDefault("client-id", "share-driver"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, args.getOrDefault("max-poll-records", "500"));
        props.put(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        props.put(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "5000");
        boolean async = args.getOrDefault("commit", "sync").equals("async");
        long workMs = Long.parseLong(args.getOrDefault("work-ms", "0"));

        Thread stdin = new Thread(ShareDriver::readStdin, "stdin");
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            if (async) {
                consumer.setAcknowledgementCommitCallback((offsets, exception) -> emit(
                        "{\"event\":\"committed\",\"partitions\":" + offsets.size()
                                + ",\"errors\":" + (exception == null ? "[]"
                                        : "[" + str(exception.toString()) + "]") + "}"));
            }
            consumer.subscribe(List.of(args.get("topic")));
            emit("{\"event\":\"started\"}");
            while (CLOSING.getCount() > 0) {
                ConsumerRecords<byte[], byte[]> batch;
                try {
                    batch = consumer.poll(Duration.ofMillis(200));
                } catch (KafkaException e) {
                    emit("{\"event\":\"error\",\"where\":\"poll\",\"error\":" + str(e.toString()) + "}");
                    continue;
                }
                if (batch.isEmpty()) {
                    continue;
                }
                boolean hold = HOLD.get();
                if (!hold && workMs > 0) {
                    Thread.sleep(workMs);  // the batch's processing, under its locks
                }
                List<String> done = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    String what = hold ? "hold" : action(r.partition(), r.offset(), count);
                    if (!hold) {
                        try {
                            consumer.acknowledge(r, ACTIONS.get(what));
                        } catch (KafkaException | IllegalStateException e) {
                            emit("{\"event\":\"error\",\"where\":\"acknowledge\",\"error\":"
                                    + str(e.toString()) + "}");
                            continue;
                        }
                    }
                    done.add("[" + r.partition() + "," + r.offset() + "," + count + "," + str(what) + "]");
                }
                // Chunks of at most 500 records: a line stays under the readers' 64 KiB.
                for (int i = 0; i < done.size(); i += 500) {
                    emit("{\"event\":\"records\",\"records\":["
                            + String.join(",", done.subList(i, Math.min(done.size(), i + 500))) + "]}");
                }
                if (hold) {
                    emit("{\"event\":\"holding\"}");
                    CLOSING.await();
                    break;
                }
                try {
                    if (async) {
                        consumer.commitAsync();
                    } else {
                        Map<TopicIdPartition, Optional<KafkaException>> result =
                                consumer.commitSync(Duration.ofSeconds(15));
                        emit("{\"event\":\"committed\",\"partitions\":" + result.size()
                                + ",\"errors\":" + errors(result) + "}");
                    }
                } catch (KafkaException e) {
                    emit("{\"event\":\"error\",\"where\":\"commit\",\"error\":" + str(e.toString()) + "}");
                }
            }
            consumer.close(Duration.ofSeconds(10));
        }
        emit("{\"event\":\"closed\"}");
        System.exit(0);
    }
}
