// A Kafka consumer driven by the real-client tests (tests/clients/README contract).
//
// Args: --bootstrap HOST:PORT --group G --topic T --assignors range,roundrobin --client-id C
//       [--instance-id I] [--session-timeout-ms N] [--heartbeat-interval-ms N]
//       [--rebalance-timeout-ms N] [--metadata-max-age-ms N (-1: the client's default)]
//       [--members N]  a swarm: N consumers in this one JVM (a thread each), client ids C-0 ..
//                      C-(N-1); every line then carries "member": its client id
//       [--security JSON]  flat {"protocol","mechanism","username","password","cafile",
//                           "certfile","keyfile"} (tests/clients/common.py): security.protocol,
//                           sasl.mechanism + a JAAS line, PEM trust/key stores
// --topic may also be a list "a,b" or a pattern "^regex": partitions are then reported as
// "topic:partition" strings instead of numbers.
// Prints one JSON object per line on stdout:
//   {"event":"started"}
//   {"event":"assigned","partitions":[...],"added":[...],"generation":G,"member_id":"..."}
//   {"event":"revoked","partitions":[...]}
//   {"event":"generation","generation":G,"member_id":"..."}   whenever the group metadata changes
//   {"event":"committed","offset":N,"partitions":[...]}   after "commit N"
//   {"event":"commit_failed","offset":N,"error":"..."}
//   {"event":"closed"}
// A line "close" on stdin (or EOF) makes it call consumer.close(), which sends LeaveGroup for a
// dynamic member; SIGKILL leaves the group to the coordinator's session timeout. A line
// "commit N" commits offset N for every owned partition (commitSync, from the poll loop).

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
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
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

    // The --security object: flat, string values only (no JSON library on the class path).
    private static Map<String, String> flatJson(String json) {
        Map<String, String> out = new HashMap<>();
        Matcher m = Pattern.compile("\"(\\w+)\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"")
                .matcher(json);
        while (m.find()) {
            out.put(m.group(1), m.group(2).replaceAll("\\\\(.)", "$1"));
        }
        return out;
    }

    static void security(Properties props, String json) {  // AdminDriver uses it too
        Map<String, String> s = flatJson(json);
        String protocol = s.getOrDefault("protocol", "PLAINTEXT");
        props.put("security.protocol", protocol);
        if (protocol.startsWith("SASL_")) {
            String mechanism = s.getOrDefault("mechanism", "PLAIN");
            String module = mechanism.equals("PLAIN")
                    ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                    : "org.apache.kafka.common.security.scram.ScramLoginModule";
            props.put("sasl.mechanism", mechanism);
            props.put("sasl.jaas.config", module + " required username=" + str(s.get("username"))
                    + " password=" + str(s.get("password")) + ";");
        }
        if (s.containsKey("cafile")) {
            props.put("ssl.truststore.type", "PEM");
            props.put("ssl.truststore.location", s.get("cafile"));
        }
        if (s.containsKey("certfile") && s.containsKey("keyfile")) {
            try {
                props.put("ssl.keystore.type", "PEM");
                props.put("ssl.keystore.certificate.chain", java.nio.file.Files.readString(
                        java.nio.file.Path.of(s.get("certfile"))));
                props.put("ssl.keystore.key", java.nio.file.Files.readString(
                        java.nio.file.Path.of(s.get("keyfile"))));
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
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
        // --group-protocol consumer: KIP-848 (issue 23). The server then owns the session timeout
        // and the heartbeat interval, and assigns (group.remote.assignor, from --assignors when
        // it names a server assignor); the classic-only settings must stay unset.
        boolean consumerProtocol = args.getOrDefault("group-protocol", "classic").equals("consumer");
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, consumerProtocol ? "consumer" : "classic");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (!consumerProtocol) {
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args.getOrDefault("session-timeout-ms", "10000"));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, args.getOrDefault("heartbeat-interval-ms", "500"));
        }
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
        if (!consumerProtocol) {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, String.join(",", assignors));
        } else {
            String first = args.getOrDefault("assignors", "").split(",")[0];
            if (first.equals("uniform") || first.equals("range")) {
                props.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, first);
            }
        }
        if (args.containsKey("security")) {
            security(props, args.get("security"));
        }

        AtomicBoolean closing = new AtomicBoolean(false);
        ConcurrentLinkedQueue<Long> commits = new ConcurrentLinkedQueue<>();
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) {
                    String[] words = line.trim().split("\\s+");
                    if (words.length == 1 && words[0].equals("close")) {
                        break;
                    }
                    if (words.length == 2 && words[0].equals("commit")) {
                        commits.add(Long.parseLong(words[1]));
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
        int members = Integer.parseInt(args.getOrDefault("members", "1"));
        if (members == 1) {
            runMember(props, topic, closing, commits, null);
        } else {
            String clientId = props.getProperty(ConsumerConfig.CLIENT_ID_CONFIG);
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < members; i++) {
                String name = clientId + "-" + i;
                Properties own = new Properties();
                own.putAll(props);
                own.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
                // Each member commits on its own "commit N"; a swarm takes none (empty queue).
                Thread t = new Thread(() -> runMember(own, topic, closing,
                        new ConcurrentLinkedQueue<>(), name), name);
                t.start();
                threads.add(t);
            }
            for (Thread t : threads) {
                t.join();
            }
        }
        System.exit(0);
    }

    // One consumer until `closing`: subscribe, poll, report. `member`: its name in a swarm (every
    // line carries it), or null.
    private static void runMember(Properties props, String topic, AtomicBoolean closing,
                                  ConcurrentLinkedQueue<Long> commits, String member) {
        String tag = member == null ? "{" : "{\"member\":" + str(member) + ",";
        java.util.TreeMap<String, TopicPartition> owned = new java.util.TreeMap<>();
        KafkaConsumer<?, ?>[] consumerRef = new KafkaConsumer<?, ?>[1];
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                    revoked.forEach(tp -> owned.remove(tp.toString()));
                    emit(tag + "\"event\":\"revoked\",\"partitions\":" + parts(revoked) + "}");
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> lost) {
                    lost.forEach(tp -> owned.remove(tp.toString()));
                    emit(tag + "\"event\":\"revoked\",\"lost\":true,\"partitions\":"
                            + parts(lost) + "}");
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> added) {
                    added.forEach(tp -> owned.put(tp.toString(), tp));
                    ConsumerGroupMetadata md = consumerRef[0].groupMetadata();
                    emit(tag + "\"event\":\"assigned\",\"partitions\":" + parts(owned.values())
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
            emit(tag + "\"event\":\"started\"}");
            int generation = -2;
            String memberId = null;
            while (!closing.get()) {
                consumer.poll(Duration.ofMillis(100));
                for (Long offset = commits.poll(); offset != null; offset = commits.poll()) {
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (TopicPartition tp : owned.values()) {
                        offsets.put(tp, new OffsetAndMetadata(offset));
                    }
                    try {
                        consumer.commitSync(offsets, Duration.ofSeconds(15));
                        emit(tag + "\"event\":\"committed\",\"offset\":" + offset
                                + ",\"partitions\":" + parts(owned.values()) + "}");
                    } catch (RuntimeException e) {
                        emit(tag + "\"event\":\"commit_failed\",\"offset\":" + offset
                                + ",\"error\":" + str(e.toString()) + "}");
                    }
                }
                ConsumerGroupMetadata md = consumer.groupMetadata();
                if (md.generationId() != generation || !md.memberId().equals(memberId)) {
                    generation = md.generationId();
                    memberId = md.memberId();
                    emit(tag + "\"event\":\"generation\",\"generation\":" + generation
                            + ",\"member_id\":" + str(memberId) + "}");
                }
            }
            consumer.close(Duration.ofSeconds(10));
        }
        emit(tag + "\"event\":\"closed\"}");
    }
}
