package amqpmirror.jms;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.qpid.jms.JmsConnectionFactory;

/**
 * A real Qpid JMS client doing transacted work against a broker, printing what it saw as JSON lines, so
 * that the same run against our broker and against Apache ActiveMQ Artemis can be compared.
 *
 * <pre>
 * java -jar jms-harness.jar URL scenarios PREFIX [NAME...]   one JSON line per scenario
 * java -jar jms-harness.jar URL traffic PREFIX               transacted traffic that leaves known messages
 * java -jar jms-harness.jar URL bench PREFIX SIZES MESSAGES BYTES WARMUP
 *     for each SIZE of SIZES (1,10,100): MESSAGES persistent messages of BYTES bytes sent in transactions of
 *     SIZE, then consumed in transactions of SIZE, on a fresh queue; after WARMUP messages to warm the JVM
 * </pre>
 *
 * Queues and topics are named PREFIX.something, so runs never meet. "Nothing arrived" is a receive that
 * waited QUIET milliseconds.
 */
public final class Harness {

    static final long QUIET = 400;
    static final long WAIT = 5000;
    static final String DUP = "_AMQ_DUPL_ID";

    private final JmsConnectionFactory factory;
    private final String prefix;

    Harness(String url, String prefix) {
        this.factory = new JmsConnectionFactory(url);
        this.prefix = prefix;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: URL scenarios|traffic|bench ...");
            System.exit(2);
        }
        Harness h = new Harness(args[0], args[2]);
        switch (args[1]) {
            case "scenarios" -> {
                List<String> names = new ArrayList<>(List.of(args).subList(3, args.length));
                if (names.isEmpty()) {
                    names = List.of("commit", "rollback", "redelivery", "consume-produce", "spanning",
                            "duplicate", "closed-with-work");
                }
                for (String name : names) {
                    Map<String, Object> result = new LinkedHashMap<>();
                    result.put("scenario", name);
                    try {
                        h.scenario(name, result);
                    } catch (Exception e) {
                        result.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                    }
                    System.out.println(Json.of(result));
                    System.out.flush();
                }
            }
            case "traffic" -> System.out.println(Json.of(h.traffic()));
            case "bench" -> {
                int messages = Integer.parseInt(args[4]);
                int bytes = Integer.parseInt(args[5]);
                int warmup = Integer.parseInt(args[6]);
                if (warmup > 0) {
                    h.bench(args[2] + ".warmup", 10, warmup / 10, bytes);
                }
                for (String size : args[3].split(",")) {
                    int n = Integer.parseInt(size);
                    System.out.println(Json.of(h.bench(args[2] + ".tx" + n, n, messages / n, bytes)));
                    System.out.flush();
                }
            }
            default -> {
                System.err.println("unknown command " + args[1]);
                System.exit(2);
            }
        }
    }

    // ------------------------------------------------------------------------------------ scenarios

    void scenario(String name, Map<String, Object> out) throws Exception {
        switch (name) {
            case "commit" -> commit(out);
            case "rollback" -> rollback(out);
            case "redelivery" -> redelivery(out);
            case "consume-produce" -> consumeProduce(out);
            case "spanning" -> spanning(out);
            case "duplicate" -> duplicate(out);
            case "closed-with-work" -> closedWithWork(out);
            default -> throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    /** Sends in a transaction: nothing visible before the commit, all of it after, in order. */
    void commit(Map<String, Object> out) throws JMSException {
        try (Connection c = open()) {
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = tx.createQueue(prefix + ".commit");
            MessageProducer producer = tx.createProducer(q);
            MessageConsumer watcher = plain.createConsumer(q);
            for (String body : List.of("a", "b", "c")) {
                producer.send(tx.createTextMessage(body));
            }
            out.put("before_commit", drain(watcher, QUIET));
            tx.commit();
            out.put("after_commit", drain(watcher, WAIT, 3));
        }
    }

    /** Sends rolled back are never stored; the session goes on working. */
    void rollback(Map<String, Object> out) throws JMSException {
        try (Connection c = open()) {
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Queue q = tx.createQueue(prefix + ".rollback");
            MessageProducer producer = tx.createProducer(q);
            producer.send(tx.createTextMessage("dropped-1"));
            producer.send(tx.createTextMessage("dropped-2"));
            tx.rollback();
            producer.send(tx.createTextMessage("kept"));
            tx.commit();
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            out.put("stored", drain(plain.createConsumer(q), WAIT, 1));
            out.put("then", drain(plain.createConsumer(q), QUIET));
        }
    }

    /** Received in a transaction and rolled back: redelivered, in order, one delivery more each time. */
    void redelivery(Map<String, Object> out) throws JMSException {
        try (Connection c = open()) {
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = plain.createQueue(prefix + ".redelivery");
            MessageProducer producer = plain.createProducer(q);
            producer.send(plain.createTextMessage("r1"));
            producer.send(plain.createTextMessage("r2"));
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer consumer = tx.createConsumer(q);
            List<Object> rounds = new ArrayList<>();
            for (int round = 0; round < 3; round++) {
                rounds.add(described(consumer, 2));
                if (round < 2) {
                    tx.rollback();
                } else {
                    tx.commit();
                }
            }
            out.put("rounds", rounds);
            out.put("left", drain(plain.createConsumer(q), QUIET));
        }
    }

    /** The consume-and-produce step: one message in, one out, atomically; a rolled-back step is redone. */
    void consumeProduce(Map<String, Object> out) throws JMSException {
        try (Connection c = open()) {
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue in = plain.createQueue(prefix + ".in");
            Queue done = plain.createQueue(prefix + ".out");
            MessageProducer feeder = plain.createProducer(in);
            for (String body : List.of("j1", "j2", "j3")) {
                feeder.send(plain.createTextMessage(body));
            }
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer jobs = tx.createConsumer(in);
            MessageProducer results = tx.createProducer(done);
            List<Object> steps = new ArrayList<>();
            for (int step = 0; step < 4; step++) {
                TextMessage job = (TextMessage) jobs.receive(WAIT);
                results.send(tx.createTextMessage("done-" + job.getText()));
                boolean undo = step == 1;
                steps.add(List.of(job.getText(), job.getJMSRedelivered(), undo ? "rollback" : "commit"));
                if (undo) {
                    tx.rollback();
                } else {
                    tx.commit();
                }
            }
            out.put("steps", steps);
            out.put("out", drain(plain.createConsumer(done), WAIT, 3));
            out.put("in_left", drain(plain.createConsumer(in), QUIET));
        }
    }

    /** One transaction across two queues, a topic (a subscriber's queue), and an acknowledgement. */
    void spanning(Map<String, Object> out) throws JMSException {
        try (Connection subscriber = open(); Connection c = open()) {
            Session subs = subscriber.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic topic = subs.createTopic(prefix + ".topic");
            MessageConsumer subscription = subs.createConsumer(topic);
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue a = plain.createQueue(prefix + ".a");
            Queue b = plain.createQueue(prefix + ".b");
            Queue work = plain.createQueue(prefix + ".work");
            plain.createProducer(work).send(plain.createTextMessage("w"));
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer taker = tx.createConsumer(work);
            Message taken = taker.receive(WAIT);
            MessageProducer anon = tx.createProducer(null);
            anon.send(a, tx.createTextMessage("to-a"));
            anon.send(b, tx.createTextMessage("to-b"));
            anon.send(topic, tx.createTextMessage("to-topic"));
            MessageConsumer watchA = plain.createConsumer(a);
            MessageConsumer watchB = plain.createConsumer(b);
            out.put("taken", ((TextMessage) taken).getText());
            out.put("before", List.of(drain(watchA, QUIET), drain(watchB, QUIET), drain(subscription, QUIET)));
            tx.commit();
            taker.close();
            out.put("after",
                    List.of(drain(watchA, WAIT, 1), drain(watchB, WAIT, 1), drain(subscription, WAIT, 1)));
            out.put("work_left", drain(plain.createConsumer(work), QUIET));
        }
    }

    /** A retried transaction whose message was stored already is refused whole (duplicate detection). */
    void duplicate(Map<String, Object> out) throws JMSException {
        try (Connection c = open()) {
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Queue q = tx.createQueue(prefix + ".dup");
            MessageProducer producer = tx.createProducer(q);
            producer.send(text(tx, "x", prefix + "-x"));
            tx.commit();
            producer.send(text(tx, "y", prefix + "-y"));
            producer.send(text(tx, "x", prefix + "-x"));
            try {
                tx.commit();
                out.put("retry_commit", "committed");
            } catch (JMSException e) {
                out.put("retry_commit", "refused");
                out.put("retry_commit_exception", e.getClass().getSimpleName());
            }
            producer.send(text(tx, "y", prefix + "-y"));
            tx.commit();
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            out.put("stored", drain(plain.createConsumer(q), WAIT, 2));
        }
    }

    /** A session closed with work in its transaction: the work is rolled back. */
    void closedWithWork(Map<String, Object> out) throws JMSException {
        try (Connection c = open()) {
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = plain.createQueue(prefix + ".closed");
            Queue sent = plain.createQueue(prefix + ".closed-sent");
            plain.createProducer(q).send(plain.createTextMessage("held"));
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Message got = tx.createConsumer(q).receive(WAIT);
            tx.createProducer(sent).send(tx.createTextMessage("never"));
            out.put("received", ((TextMessage) got).getText());
            tx.close();
            out.put("back", described(plain.createConsumer(q), 1));
            out.put("sent", drain(plain.createConsumer(sent), QUIET));
        }
    }

    // ------------------------------------------------------------------------------------ traffic

    /**
     * Transacted traffic that leaves a known set of messages behind (for a mirror to copy): ten
     * transactions of five sends, every other one rolled back; a transacted consumer takes three and commits,
     * takes two and rolls back; four consume-and-produce steps; a retried transaction refused as a
     * duplicate. Left: PREFIX.orders holds 18, PREFIX.done 4.
     */
    Map<String, Object> traffic() throws JMSException {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Connection c = open()) {
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Queue orders = tx.createQueue(prefix + ".orders");
            Queue done = tx.createQueue(prefix + ".done");
            MessageProducer producer = tx.createProducer(orders);
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            for (int t = 0; t < 10; t++) {
                for (int i = 0; i < 5; i++) {
                    producer.send(text(tx, "order-" + t + "-" + i, prefix + "-order-" + t + "-" + i));
                }
                if (t % 2 == 0) {
                    tx.commit();
                } else {
                    tx.rollback();
                }
            }
            MessageConsumer consumer = tx.createConsumer(orders);
            List<String> consumed = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                consumed.add(((TextMessage) consumer.receive(WAIT)).getText());
            }
            tx.commit();
            for (int i = 0; i < 2; i++) {
                consumer.receive(WAIT);
            }
            tx.rollback();
            MessageProducer results = tx.createProducer(done);
            for (int i = 0; i < 4; i++) {
                TextMessage job = (TextMessage) consumer.receive(WAIT);
                results.send(tx.createTextMessage("done-" + job.getText()));
                consumed.add(job.getText());
                tx.commit();
            }
            consumer.close();
            producer.send(text(tx, "order-0-0", prefix + "-order-0-0"));  // a retry of a committed send
            try {
                tx.commit();
                out.put("retry_commit", "committed");
            } catch (JMSException e) {
                out.put("retry_commit", "refused");
                out.put("retry_commit_exception", e.getClass().getSimpleName());
            }
            out.put("consumed", consumed);
        }
        return out;
    }

    // ------------------------------------------------------------------------------------ bench

    /** TXS transactions of SIZE persistent messages of BYTES bytes each, sent, then consumed in
     * transactions of SIZE; the seconds each half took. */
    Map<String, Object> bench(String queue, int size, int transactions, int bytes) throws JMSException {
        Map<String, Object> out = new LinkedHashMap<>();
        String body = "x".repeat(bytes);
        try (Connection c = open()) {
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Queue q = tx.createQueue(queue);
            MessageProducer producer = tx.createProducer(q);
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            long start = System.nanoTime();
            for (int t = 0; t < transactions; t++) {
                for (int i = 0; i < size; i++) {
                    producer.send(tx.createTextMessage(body));
                }
                tx.commit();
            }
            double produce = (System.nanoTime() - start) / 1e9;
            MessageConsumer consumer = tx.createConsumer(q);
            start = System.nanoTime();
            for (int t = 0; t < transactions; t++) {
                for (int i = 0; i < size; i++) {
                    if (consumer.receive(WAIT) == null) {
                        throw new IllegalStateException("message " + (t * size + i) + " did not come");
                    }
                }
                tx.commit();
            }
            double consume = (System.nanoTime() - start) / 1e9;
            out.put("tx_size", size);
            out.put("transactions", transactions);
            out.put("produce_seconds", produce);
            out.put("consume_seconds", consume);
        }
        return out;
    }

    // ------------------------------------------------------------------------------------ helpers

    Connection open() throws JMSException {
        return open(null);
    }

    Connection open(String clientId) throws JMSException {
        Connection c = factory.createConnection();
        if (clientId != null) {
            c.setClientID(clientId);
        }
        c.start();
        return c;
    }

    static TextMessage text(Session s, String body, String dup) throws JMSException {
        TextMessage m = s.createTextMessage(body);
        m.setStringProperty(DUP, dup);
        return m;
    }

    /** Bodies received until `quiet` ms pass with nothing (or `count` arrived). */
    static List<String> drain(MessageConsumer consumer, long quiet) throws JMSException {
        return drain(consumer, quiet, Integer.MAX_VALUE);
    }

    static List<String> drain(MessageConsumer consumer, long wait, int count) throws JMSException {
        List<String> bodies = new ArrayList<>();
        while (bodies.size() < count) {
            Message m = consumer.receive(bodies.isEmpty() || count != Integer.MAX_VALUE ? wait : QUIET);
            if (m == null) {
                break;
            }
            bodies.add(((TextMessage) m).getText());
        }
        return bodies;
    }

    /** [body, JMSRedelivered, JMSXDeliveryCount] of the next `count` messages. */
    static List<Object> described(MessageConsumer consumer, int count) throws JMSException {
        List<Object> seen = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Message m = consumer.receive(WAIT);
            if (m == null) {
                seen.add(null);
                continue;
            }
            seen.add(List.of(((TextMessage) m).getText(), m.getJMSRedelivered(),
                    m.getIntProperty("JMSXDeliveryCount")));
        }
        return seen;
    }

    /** Just enough JSON for the results: maps, lists, strings, numbers, booleans, null. */
    static final class Json {
        static String of(Object value) {
            StringBuilder sb = new StringBuilder();
            write(sb, value);
            return sb.toString();
        }

        static void write(StringBuilder sb, Object value) {
            if (value == null) {
                sb.append("null");
            } else if (value instanceof Map<?, ?> map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : map.entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (value instanceof List<?> list) {
                sb.append('[');
                for (int i = 0; i < list.size(); i++) {
                    if (i > 0) {
                        sb.append(',');
                    }
                    write(sb, list.get(i));
                }
                sb.append(']');
            } else if (value instanceof Number || value instanceof Boolean) {
                sb.append(value);
            } else {
                sb.append('"');
                for (char ch : value.toString().toCharArray()) {
                    switch (ch) {
                        case '"' -> sb.append("\\\"");
                        case '\\' -> sb.append("\\\\");
                        case '\n' -> sb.append("\\n");
                        default -> {
                            if (ch < 0x20) {
                                sb.append(String.format("\\u%04x", (int) ch));
                            } else {
                                sb.append(ch);
                            }
                        }
                    }
                }
                sb.append('"');
            }
        }
    }
}
