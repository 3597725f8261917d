// One admin call through the Java AdminClient, printed as one JSON line (the real-client tests).
//
// Args: BOOTSTRAP list | describe GROUP | delete GROUP | create-topic TOPIC PARTITIONS
//       | create-partitions TOPIC COUNT | delete-topic TOPIC
//   list     -> {"groups":{"g":"STABLE",...}}
//   describe -> {"state":"STABLE","protocol":"range","members":{"member-id":[0,1,...]}}
//   delete, create-topic, create-partitions, delete-topic
//            -> {"result":"OK"} or {"result":"<exception simple name>"}

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

public final class AdminDriver {
    private static String str(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private static String result(KafkaFuture<Void> future) throws Exception {
        String result = "OK";
        try {
            future.get(15, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            result = e.getCause().getClass().getSimpleName();
        }
        return "{\"result\":" + str(result) + "}";
    }

    public static void main(String[] argv) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, argv[0]);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        String out;
        try (Admin admin = Admin.create(props)) {
            switch (argv[1]) {
                case "list": {
                    List<String> parts = new ArrayList<>();
                    for (ConsumerGroupListing g : admin.listConsumerGroups().all().get(15, TimeUnit.SECONDS)) {
                        String state = g.state().map(Object::toString).orElse("");
                        parts.add(str(g.groupId()) + ":" + str(state));
                    }
                    out = "{\"groups\":{" + String.join(",", parts) + "}}";
                    break;
                }
                case "describe": {
                    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(argv[2]))
                            .all().get(15, TimeUnit.SECONDS).get(argv[2]);
                    List<String> members = new ArrayList<>();
                    for (MemberDescription m : d.members()) {
                        TreeSet<Integer> ps = new TreeSet<>();
                        for (TopicPartition tp : m.assignment().topicPartitions()) {
                            ps.add(tp.partition());
                        }
                        members.add(str(m.consumerId()) + ":" + ps.toString().replace(" ", ""));
                    }
                    out = "{\"state\":" + str(d.state().toString()) + ",\"protocol\":"
                            + str(d.partitionAssignor()) + ",\"members\":{"
                            + String.join(",", members) + "}}";
                    break;
                }
                case "delete": {
                    String result = "OK";
                    try {
                        admin.deleteConsumerGroups(List.of(argv[2])).all().get(15, TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        result = e.getCause().getClass().getSimpleName();
                    }
                    out = "{\"result\":" + str(result) + "}";
                    break;
                }
                case "create-topic":
                    out = result(admin.createTopics(List.of(
                            new NewTopic(argv[2], Integer.parseInt(argv[3]), (short) 1))).all());
                    break;
                case "create-partitions":
                    out = result(admin.createPartitions(Map.of(
                            argv[2], NewPartitions.increaseTo(Integer.parseInt(argv[3])))).all());
                    break;
                case "delete-topic":
                    out = result(admin.deleteTopics(List.of(argv[2])).all());
                    break;
                default:
                    throw new IllegalArgumentException("unknown command " + argv[1]);
            }
        }
        System.out.println(out);
        System.out.flush();
        System.exit(0);
    }
}
