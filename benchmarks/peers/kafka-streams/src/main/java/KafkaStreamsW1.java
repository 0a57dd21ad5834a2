import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * W1, the ReadWrite counter, on Kafka Streams through a Kafka broker: the peer of samza-dsl's W7.
 *
 * <p>Reads the input topic (keys: the id as a string; values: JSON {"id", "pad"}), and per
 * record decodes the JSON value, reads the key's count from a key-value store, adds 1, writes it
 * back and emits (key, the count as JSON) to the output topic. The store is RocksDB with a
 * changelog topic, behind Kafka Streams' record cache ({@code withCachingEnabled()}, as the
 * DSL's own aggregations have it): between commits a key's reads and writes stay in memory and
 * the changelog gets its last value at the commit, as samza-dsl's LMDB store with its
 * write-back cache does. {@code uncached} runs without the cache. One stream thread (the
 * default) and Kafka Streams' defaults but for the commit interval, 1 s as samza-dsl's W7 job
 * ({@code task.commit.ms}), and the consumer's session timeout, 6 s (heartbeats every 0.5 s).
 *
 * <p>The input is bounded by the caller: the run ends once the processor has handled the given
 * number of records; then {@code close()} flushes the producer (every output record
 * acknowledged by the broker) and the stores and commits. The clock runs from {@code start()}
 * to the end of {@code close()}: group join, assignment, store set-up, processing, the last
 * acknowledgement and the final commit, as samza-dsl's W7 job is timed from its runner's start
 * to its end. The JVM's start and the topology's build come before it.
 *
 * <pre>
 * java -cp 'w1-kafka-streams.jar:lib/*' KafkaStreamsW1 BOOTSTRAP INPUT OUTPUT MESSAGES
 *     APPLICATION_ID STATE_DIR [at_least_once|exactly_once_v2] [cached|uncached]
 * </pre>
 *
 * <p>Prints one JSON line: messages, seconds, msgs_per_s, first_record_seconds (from start()
 * to the first record handled), close_seconds, cpu_seconds (the JVM's, every thread, over the
 * timed span), second_half_msgs_per_s (the rate from the middle record to the last, the JIT
 * warm by then), threads_cpu_seconds (the JVM's threads' CPU from its start to the last record, by kind),
 * the processing guarantee, Kafka Streams' version and the JVM's peak RSS.
 */
public final class KafkaStreamsW1 {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final String STORE = "counts";
    /** Records handled by every task together. */
    private static final AtomicLong SEEN = new AtomicLong();
    /** When the middle and the last record were handled. */
    private static final long[] HALF_NANOS = new long[1];
    private static final long[] LAST_NANOS = new long[1];

    /** Per record: decode the value, read the key's count, add 1, write it back, emit it. */
    static final class CountInStore implements Processor<String, byte[], String, byte[]> {
        private final long messages;
        private final CountDownLatch done;
        private final long[] firstRecordNanos;
        private ProcessorContext<String, byte[]> context;
        private KeyValueStore<String, Integer> store;

        CountInStore(long messages, CountDownLatch done, long[] firstRecordNanos) {
            this.messages = messages;
            this.done = done;
            this.firstRecordNanos = firstRecordNanos;
        }

        @Override
        public void init(ProcessorContext<String, byte[]> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, byte[]> record) {
            JsonNode event;
            try {
                event = MAPPER.readTree(record.value());
            } catch (IOException e) {
                throw new IllegalStateException("W1: a value that is not JSON", e);
            }
            if (event.get("id") == null) {
                throw new IllegalStateException("W1: a value without an id: " + event);
            }
            Integer count = store.get(record.key());
            int next = (count == null ? 0 : count) + 1;
            store.put(record.key(), next);
            byte[] value;
            try {
                value = MAPPER.writeValueAsBytes(next);
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            context.forward(record.withValue(value));
            if (firstRecordNanos[0] == 0) {
                firstRecordNanos[0] = System.nanoTime();
            }
            long seen = SEEN.incrementAndGet();
            if (seen == messages / 2) {
                HALF_NANOS[0] = System.nanoTime();
            }
            if (seen == messages) {
                LAST_NANOS[0] = System.nanoTime();
                done.countDown();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        if (args.length < 6) {
            System.err.println("usage: KafkaStreamsW1 BOOTSTRAP INPUT OUTPUT MESSAGES "
                + "APPLICATION_ID STATE_DIR [at_least_once|exactly_once_v2] [cached|uncached]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String input = args[1];
        String output = args[2];
        long messages = Long.parseLong(args[3]);
        String applicationId = args[4];
        String stateDir = args[5];
        String guarantee = args.length > 6 ? args[6] : StreamsConfig.AT_LEAST_ONCE;
        boolean cached = !(args.length > 7 && args[7].equals("uncached"));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        // tansu completes a group's join after about half the session timeout (45 s by
        // default): a short one, as the Quix Streams peer has, so that the figure is not the join
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 6000);
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);

        CountDownLatch done = new CountDownLatch(1);
        long[] firstRecordNanos = new long[1];
        StreamsBuilder builder = new StreamsBuilder();
        StoreBuilder<KeyValueStore<String, Integer>> store = Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Integer());
        builder.addStateStore(cached ? store.withCachingEnabled() : store);
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .process(() -> new CountInStore(messages, done, firstRecordNanos), STORE)
            .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        Throwable[] failed = new Throwable[1];
        streams.setUncaughtExceptionHandler(e -> {
            failed[0] = e;
            done.countDown();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
            java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        streams.start();
        if (!done.await(900, TimeUnit.SECONDS)) {
            streams.close(Duration.ofSeconds(30));
            throw new IllegalStateException("W1: handled " + SEEN.get() + " of " + messages
                + " records in 900 s");
        }
        String threadsCpu = threadsCpu();  // before close() ends the stream thread
        long closing = System.nanoTime();
        boolean closed = streams.close(Duration.ofSeconds(120));
        long t1 = System.nanoTime();
        long cpu1 = os.getProcessCpuTime();
        if (failed[0] != null) {
            throw new IllegalStateException("W1: a stream thread failed", failed[0]);
        }
        if (!closed) {
            throw new IllegalStateException("W1: Kafka Streams did not close within 120 s");
        }
        double seconds = (t1 - t0) / 1e9;
        System.out.println("{\"system\": \"kafka-streams\", \"version\": \""
            + AppInfoParser.getVersion() + "\", \"messages\": " + messages
            + ", \"seconds\": " + round(seconds, 4)
            + ", \"msgs_per_s\": " + round(messages / seconds, 1)
            + ", \"first_record_seconds\": " + round((firstRecordNanos[0] - t0) / 1e9, 4)
            + ", \"close_seconds\": " + round((t1 - closing) / 1e9, 4)
            + ", \"cpu_seconds\": " + round((cpu1 - cpu0) / 1e9, 3)
            + ", \"second_half_msgs_per_s\": "
            + round((messages - messages / 2) / ((LAST_NANOS[0] - HALF_NANOS[0]) / 1e9), 1)
            + ", \"threads_cpu_seconds\": " + threadsCpu
            + ", \"processing_guarantee\": \"" + guarantee + "\""
            + ", \"peak_rss_mb\": " + round(peakRssMb(), 1) + "}");
    }

    /** The CPU seconds of the JVM's threads by name (digits dropped: one entry per kind),
     * the largest first, as a JSON object. */
    private static String threadsCpu() {
        java.util.Map<String, Double> byName = new java.util.HashMap<>();
        long tick = 100;  // USER_HZ on Linux
        java.util.List<Path> tasks;
        try (var listing = Files.list(Path.of("/proc/self/task"))) {
            tasks = listing.toList();
        } catch (IOException e) {
            return "{}";
        }
        for (Path task : tasks) {
            String stat;
            try {
                stat = Files.readString(task.resolve("stat"));
            } catch (IOException e) {
                continue;  // the thread has ended
            }
            String name = stat.substring(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
                .replaceAll("[0-9]+", "N");
            String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            double cpu = (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) / (double) tick;
            byName.merge(name, cpu, Double::sum);
        }
        StringBuilder out = new StringBuilder("{");
        byName.entrySet().stream()
            .sorted((a, b) -> Double.compare(b.getValue(), a.getValue()))
            .filter(e -> e.getValue() >= 0.05)
            .forEach(e -> out.append(out.length() > 1 ? ", " : "").append('"')
                .append(e.getKey().replace("\"", "")).append("\": ")
                .append(round(e.getValue(), 2)));
        return out.append('}').toString();
    }

    private static double round(double x, int digits) {
        double scale = Math.pow(10, digits);
        return Math.round(x * scale) / scale;
    }

    /** The process's peak resident set (VmHWM), in MB; 0 where /proc is not there. */
    private static double peakRssMb() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
                }
            }
        } catch (IOException | NumberFormatException e) {
            return 0;
        }
        return 0;
    }
}
