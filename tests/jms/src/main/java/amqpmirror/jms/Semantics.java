package amqpmirror.jms;

import jakarta.jms.Connection;
import jakarta.jms.Destination;
import jakarta.jms.DeliveryMode;
import jakarta.jms.InvalidDestinationException;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.qpid.jms.JmsConnectionFactory;

/**
 * Priority, selectors, queue browsers, durable subscriptions with selectors (and unsubscribing) and
 * no-local through a real Qpid JMS client, one JSON line per scenario, so that the same run against our
 * broker and against Apache ActiveMQ Artemis can be compared.
 *
 * <pre>
 * java -cp jms-harness.jar amqpmirror.jms.Semantics URL PREFIX [NAME...]
 * </pre>
 */
public final class Semantics {

    static final int[] PRIORITIES = {4, 1, 9, 4, 0, 7, 9, 4, 5, 1, 9, 3, 8, 2, 6, 4, 0};
    static final String[] COLORS = {"red", "blue", "red", "green", "blue", "red"};

    private final JmsConnectionFactory factory;
    private final JmsConnectionFactory unprefetched;
    private final String prefix;

    Semantics(String url, String prefix) {
        this.factory = new JmsConnectionFactory(url);
        this.unprefetched = new JmsConnectionFactory(url + (url.contains("?") ? "&" : "?")
                + "jms.prefetchPolicy.all=0");
        this.prefix = prefix;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: URL PREFIX [NAME...]");
            System.exit(2);
        }
        Semantics s = new Semantics(args[0], args[1]);
        List<String> names = new ArrayList<>(List.of(args).subList(2, args.length));
        if (names.isEmpty()) {
            names = List.of("priority", "selectors", "browser", "durable-selector", "no-local");
        }
        for (String name : names) {
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("scenario", name);
            try {
                s.scenario(name, result);
            } catch (Exception e) {
                result.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            System.out.println(Harness.Json.of(result));
            System.out.flush();
        }
    }

    void scenario(String name, Map<String, Object> out) throws Exception {
        switch (name) {
            case "priority" -> priority(out);
            case "selectors" -> selectors(out);
            case "browser" -> browser(out);
            case "durable-selector" -> durableSelector(out);
            case "no-local" -> noLocal(out);
            default -> throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    /**
     * Persistent messages of mixed priorities waiting, then consumed: three received and not acknowledged
     * come back on a new connection, each in its place within its priority.
     */
    void priority(Map<String, Object> out) throws JMSException {
        Queue q;
        // no prefetch: the three are all this consumer holds when its connection closes, so the order of
        // what comes back is all this compares
        try (Connection c = unprefetched.createConnection()) {
            c.start();
            Session s = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            q = s.createQueue(prefix + ".priority");
            MessageProducer producer = s.createProducer(q);
            for (int i = 0; i < PRIORITIES.length; i++) {
                producer.send(s.createTextMessage("p" + i), DeliveryMode.PERSISTENT, PRIORITIES[i], 0);
            }
            out.put("first", Harness.drain(s.createConsumer(q), Harness.WAIT, 3)); // never acknowledged
        }
        try (Connection c = open(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer consumer = s.createConsumer(q);
            List<Object> all = new ArrayList<>();
            Message m;
            while ((m = consumer.receive(Harness.QUIET)) != null) {
                all.add(List.of(((TextMessage) m).getText(), m.getJMSPriority(), m.getJMSRedelivered()));
            }
            out.put("then", all);
        }
    }

    /** Consumers with selectors over headers and properties share one queue; a plain one takes the rest. */
    void selectors(Map<String, Object> out) throws JMSException {
        try (Connection c = open(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(prefix + ".selectors");
            send(s, q);
            Map<String, Object> got = new LinkedHashMap<>();
            for (String selector : List.of("color = 'red'", "weight > 3 AND JMSPriority >= 5",
                    "JMSType = 'order'", "JMSCorrelationID = 'c-1'", "color LIKE 'gr%'")) {
                MessageConsumer consumer = s.createConsumer(q, selector);
                got.put(selector, Harness.drain(consumer, Harness.QUIET));
                consumer.close();
            }
            got.put("(the rest)", Harness.drain(s.createConsumer(q), Harness.QUIET));
            out.put("got", got);
            try {
                s.createConsumer(q, "color =");
                out.put("invalid", "accepted");
            } catch (JMSException e) {
                out.put("invalid", e.getClass().getSimpleName());
            }
        }
    }

    /** A browser (with and without a selector) sees what waits and takes nothing. */
    void browser(Map<String, Object> out) throws JMSException {
        try (Connection c = open(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(prefix + ".browsed");
            send(s, q);
            out.put("all", browse(s.createBrowser(q)));
            out.put("reds", browse(s.createBrowser(q, "color = 'red'")));
            out.put("again", browse(s.createBrowser(q)));
            out.put("consumed", Harness.drain(s.createConsumer(q), Harness.QUIET));
        }
    }

    /**
     * A durable subscription with a selector keeps what it matches while nobody listens; subscribing again
     * with another selector makes it anew; unsubscribing deletes it (an unknown name is refused).
     */
    void durableSelector(Map<String, Object> out) throws JMSException {
        String client = prefix + "-durable";
        try (Connection c = open(client)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(prefix + ".news");
            s.createDurableSubscriber(t, "reds", "color = 'red'", false).close();
            send(s, t);
            MessageConsumer reds = s.createDurableSubscriber(t, "reds", "color = 'red'", false);
            out.put("kept", Harness.drain(reds, Harness.QUIET));
            reds.close();
            send(s, t);
            MessageConsumer blues = s.createDurableSubscriber(t, "reds", "color = 'blue'", false);
            out.put("changed", Harness.drain(blues, Harness.QUIET));
            blues.close();
            s.unsubscribe("reds");
            send(s, t);
            MessageConsumer fresh = s.createDurableSubscriber(t, "reds", "color = 'blue'", false);
            out.put("after_unsubscribe", Harness.drain(fresh, Harness.QUIET));
            fresh.close();
            s.unsubscribe("reds");
            try {
                s.unsubscribe("never");
                out.put("unknown", "unsubscribed");
            } catch (InvalidDestinationException e) {
                out.put("unknown", "InvalidDestinationException");
            }
        }
    }

    /** A no-local subscriber does not get what its own connection sends. */
    void noLocal(Map<String, Object> out) throws JMSException {
        try (Connection mine = open(prefix + "-local"); Connection theirs = open(null)) {
            Session s = mine.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(prefix + ".chat");
            MessageConsumer quiet = s.createConsumer(t, null, true);
            MessageConsumer loud = s.createConsumer(t);
            s.createProducer(t).send(s.createTextMessage("mine"));
            Session other = theirs.createSession(false, Session.AUTO_ACKNOWLEDGE);
            other.createProducer(other.createTopic(prefix + ".chat")).send(other.createTextMessage("theirs"));
            out.put("no_local", Harness.drain(quiet, Harness.QUIET));
            out.put("plain", Harness.drain(loud, Harness.QUIET));
        }
    }

    // ------------------------------------------------------------------------------------ helpers

    Connection open(String clientId) throws JMSException {
        Connection c = factory.createConnection();
        if (clientId != null) {
            c.setClientID(clientId);
        }
        c.start();
        return c;
    }

    /** Six messages: color and weight properties, JMSType, JMSCorrelationID and priorities varied. */
    static void send(Session s, Destination d) throws JMSException {
        MessageProducer producer = s.createProducer(d);
        for (int i = 0; i < COLORS.length; i++) {
            TextMessage m = s.createTextMessage("m" + i);
            m.setStringProperty("color", COLORS[i]);
            m.setIntProperty("weight", i + 1);
            m.setJMSType(i % 2 == 0 ? "order" : "invoice");
            m.setJMSCorrelationID(i < 3 ? "c-1" : "c-2");
            producer.send(m, DeliveryMode.PERSISTENT, 3 + i, 0);
        }
        producer.close();
    }

    static List<String> browse(QueueBrowser browser) throws JMSException {
        List<String> seen = new ArrayList<>();
        Enumeration<?> e = browser.getEnumeration();
        while (e.hasMoreElements()) {
            seen.add(((TextMessage) e.nextElement()).getText());
        }
        browser.close();
        return seen;
    }
}
