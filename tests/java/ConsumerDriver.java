// A Kafka consumer driven by the real-client tests (tests/clients/README contract).
//
// Args: --bootstrap HOST:PORT --group G --topic T --assignors range,roundrobin --client-id C
//       [--instance-id I] [--session-timeout-ms N] [--heartbeat-interval-ms N]
//       [--rebalance-timeout-ms N] [--metadata-max-age-ms N (-1: the client's default)]
// --topic may also be a list "a,b" or a pattern "^regex": partitions are then reported as
// "topic:partition" strings instead of numbers.
// Prints one JSON object per line on stdout:
//   {"event":"started"}
//   {"event":"assigned","partitions":[...],"added":[...],"generation":G,"member_id":"..."}
//   {"event":"revoked","partitions":[...]}
//   {"event":"generation","generation":G,"member_id":"..."}   whenever the group metadata changes
//   {"event":"closed"}
// A line "close" on stdin (or EOF) makes it call consumer.close(), which sends LeaveGroup for a
// dynamic member; SIGKILL leaves the group to the coordinator's session timeout.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ConsumerDriver {
    private static final Map<String, String> ASSIGNORS = Map.of(
            "range", "org.apache.kafka.clients.consumer.RangeAssignor",
            "roundrobin", "org.apache.kafka.clients.consumer.RoundRobinAssignor",
            "sticky", "org.apache.kafka.clients.consumer.StickyAssignor",
            "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String str(String s) {
        if (s == null) {
            return "null";
        }
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

    private static String ints(Collection<Integer> xs) {
        List<String> parts = new ArrayList<>();
        for (int x : new TreeSet<>(xs)) {
            parts.add(Integer.toString(x));
        }
        return "[" + String.join(",", parts) + "]";
    }

    private static boolean named;  // several topics: "topic:partition" strings

    private static String parts(Collection<TopicPartition> tps) {
        if (!named) {
            return ints(partitions(tps));
        }
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            out.add(str(tp.topic() + ":" + tp.partition()));
        }
        java.util.Collections.sort(out);
        return "[" + String.join(",", out) + "]";
    }

    private static List<Integer> partitions(Collection<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            out.add(tp.partition());
        }
        return out;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, args.getOrDefault("client-id", "java-driver"));
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args.getOrDefault("session-timeout-ms", "10000"));
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, args.getOrDefault("heartbeat-interval-ms", "500"));
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, args.getOrDefault("rebalance-timeout-ms", "30000"));
        props.put(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        props.put(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        String maxAge = args.getOrDefault("metadata-max-age-ms", "5000");
        if (!maxAge.equals("-1")) {  // -1: the client's default (5 minutes)
            props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, maxAge);
        }
        if (args.containsKey("instance-id")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args.get("instance-id"));
        }
        List<String> assignors = new ArrayList<>();
        for (String name : args.getOrDefault("assignors", "range").split(",")) {
            assignors.add(ASSIGNORS.getOrDefault(name, name));
        }
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, String.join(",", assignors));

        AtomicBoolean closing = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("close")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // EOF or a broken pipe both mean: close.
            }
            closing.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        String topic = args.get("topic");
        named = topic.startsWith("^") || topic.contains(",");
        java.util.TreeMap<String, TopicPartition> owned = new java.util.TreeMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                    revoked.forEach(tp -> owned.remove(tp.toString()));
                    emit("{\"event\":\"revoked\",\"partitions\":" + parts(revoked) + "}");
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> lost) {
                    lost.forEach(tp -> owned.remove(tp.toString()));
                    emit("{\"event\":\"revoked\",\"lost\":true,\"partitions\":"
                            + parts(lost) + "}");
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> added) {
                    added.forEach(tp -> owned.put(tp.toString(), tp));
                    ConsumerGroupMetadata md = consumerRef[0].groupMetadata();
                    emit("{\"event\":\"assigned\",\"partitions\":" + parts(owned.values())
                            + ",\"added\":" + parts(added)
                            + ",\"generation\":" + md.generationId()
                            + ",\"member_id\":" + str(md.memberId()) + "}");
                }
            };
            if (topic.startsWith("^")) {
                consumer.subscribe(Pattern.compile(topic), listener);
            } else {
                consumer.subscribe(List.of(topic.split(",")), listener);
            }
            consumerRef[0] = consumer;
            emit("{\"event\":\"started\"}");
            int generation = -2;
            String memberId = null;
            while (!closing.get()) {
                consumer.poll(Duration.ofMillis(100));
                ConsumerGroupMetadata md = consumer.groupMetadata();
                if (md.generationId() != generation || !md.memberId().equals(memberId)) {
                    generation = md.generationId();
                    memberId = md.memberId();
                    emit("{\"event\":\"generation\",\"generation\":" + generation
                            + ",\"member_id\":" + str(memberId) + "}");
                }
            }
            consumer.close(Duration.ofSeconds(10));
        }
        emit("{\"event\":\"closed\"}");
        System.exit(0);
    }

    private static final KafkaConsumer<?, ?>[] consumerRef = new KafkaConsumer<?, ?>[1];
}
