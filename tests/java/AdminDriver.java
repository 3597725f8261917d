// One admin call through the Java AdminClient, printed as one JSON line (the real-client tests).
//
// Args: BOOTSTRAP list | describe GROUP | delete GROUP | create-topic TOPIC PARTITIONS
//       | create-partitions TOPIC COUNT | delete-topic TOPIC
//       | create-acl PRINCIPAL GROUP|TOPIC NAME OPERATION | describe-acls | delete-acls PRINCIPAL
//   with the environment's ADMIN_SECURITY: ConsumerDriver's --security object (TLS, SASL)
//   create-acl, delete-acls -> {"result":"OK"} (delete-acls: {"deleted":N})
//   describe-acls -> {"acls":["GROUP:g:User:alice:READ:ALLOW",...]} (sorted)
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
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

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
        String security = System.getenv("ADMIN_SECURITY");
        if (security != null && !security.isEmpty()) {
            ConsumerDriver.security(props, security);
        }
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
                case "create-acl": {
                    AclBinding acl = new AclBinding(
                            new ResourcePattern(ResourceType.fromString(argv[3]), argv[4],
                                    PatternType.LITERAL),
                            new AccessControlEntry(argv[2], "*", AclOperation.fromString(argv[5]),
                                    AclPermissionType.ALLOW));
                    out = result(admin.createAcls(List.of(acl)).all());
                    break;
                }
                case "describe-acls": {
                    TreeSet<String> acls = new TreeSet<>();
                    for (AclBinding b : admin.describeAcls(AclBindingFilter.ANY).values()
                            .get(15, TimeUnit.SECONDS)) {
                        acls.add(str(b.pattern().resourceType() + ":" + b.pattern().name() + ":"
                                + b.entry().principal() + ":" + b.entry().operation() + ":"
                                + b.entry().permissionType()));
                    }
                    out = "{\"acls\":[" + String.join(",", acls) + "]}";
                    break;
                }
                case "delete-acls": {
                    AclBindingFilter filter = new AclBindingFilter(ResourcePatternFilter.ANY,
                            new AccessControlEntryFilter(argv[2], null, AclOperation.ANY,
                                    AclPermissionType.ANY));
                    int deleted = admin.deleteAcls(List.of(filter)).all()
                            .get(15, TimeUnit.SECONDS).size();
                    out = "{\"deleted\":" + deleted + "}";
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown command " + argv[1]);
            }
        }
        System.out.println(out);
        System.out.flush();
        System.exit(0);
    }
}
