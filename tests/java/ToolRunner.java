// Runs Kafka's own command-line tools (kafka-consumer-groups.sh's ConsumerGroupCommand,
// kafka-acls.sh's AclCommand, ...) many times in one JVM, so a test pays the JVM's start once and
// not per command (tests/support/kafka_tools.py drives it).
//
// Usage: java -cp 'kafka/lib/*:classes' ToolRunner
// stdin: one command per line, its words separated by TABs, the first word the main class.
// stdout: for each command, a header line "@@ <exit code> <stdout bytes> <stderr bytes>" and
// then the command's stdout and stderr, byte for byte. The tool's exits
// (Kafka's Exit class) are caught and become the exit code; an uncaught
// exception is exit code 99 with its stack trace on the command's stderr.
// Reflection only, so it compiles against kafka-clients alone (make peers compiles tests/java).

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

public class ToolRunner {
    static final class Exited extends RuntimeException {
        final int code;

        Exited(int code) {
            super("exit " + code, null, false, false);
            this.code = code;
        }
    }

    public static void main(String[] args) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        // Kafka 4.4 moved Exit to common.utils.internals; older releases have it in common.utils.
        String exitName = "org.apache.kafka.common.utils.internals.Exit";
        Class<?> exit;
        try {
            exit = Class.forName(exitName);
        } catch (ClassNotFoundException e) {
            exitName = "org.apache.kafka.common.utils.Exit";
            exit = Class.forName(exitName);
        }
        Class<?> procedure = Class.forName(exitName + "$Procedure");
        Object thrower = java.lang.reflect.Proxy.newProxyInstance(
            procedure.getClassLoader(), new Class<?>[] {procedure}, (proxy, method, margs) -> {
                if (method.getName().equals("execute")) {
                    throw new Exited((Integer) margs[0]);
                }
                return method.invoke(proxy, margs);
            });
        exit.getMethod("setExitProcedure", procedure).invoke(null, thrower);
        exit.getMethod("setHaltProcedure", procedure).invoke(null, thrower);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isEmpty()) {
                continue;
            }
            String[] words = line.split("\t", -1);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream outStream = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream errStream = new PrintStream(err, true, StandardCharsets.UTF_8);
            System.setOut(outStream);
            System.setErr(errStream);
            int code = 0;
            try {
                Method main = Class.forName(words[0]).getMethod("main", String[].class);
                main.invoke(null, (Object) Arrays.copyOfRange(words, 1, words.length));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof Exited) {
                    code = ((Exited) cause).code;
                } else {
                    code = 99;
                    cause.printStackTrace(errStream);
                }
            } catch (Exited e) {
                code = e.code;
            } finally {
                outStream.flush();
                errStream.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            byte[] o = out.toByteArray();
            byte[] r = err.toByteArray();
            realOut.print("@@ " + code + " " + o.length + " " + r.length + "\n");
            realOut.write(o);
            realOut.write(r);
            realOut.flush();
        }
    }
}
