package dev.progresscontrol.kafka.streams;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.progresscontrol.core.TrustPolicy;
import dev.progresscontrol.kafka.streams.example.CallCounts;
import dev.progresscontrol.kafka.streams.example.TickedWindows;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/** The helpers on Kafka Streams' own operators (TopologyTestDriver: real processors and stores). */
class ControlledTopologyTest {

    private static final String SENTINEL = ProgressControl.DEFAULT_SENTINEL_KEY;
    private static final Duration GAP = Duration.ofMillis(1_000);
    private static final String SECRET = "0123456789abcdef-secret";

    private static Properties config() {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "companion-test");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Emit on window close at every record, not at most once a second of wall-clock time.
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, 0L);
        return props;
    }

    /** A run of the example topology. */
    private static final class Run implements AutoCloseable {
        final CallCounts calls = new CallCounts();
        final TopologyTestDriver driver;
        final TestInputTopic<String, String> clicks;
        final TestOutputTopic<String, String> sessions;
        final TestOutputTopic<String, String> sliding;

        Run(Properties props) {
            StreamsBuilder builder = new StreamsBuilder();
            TickedWindows.build(builder, "clicks", "sessions", "sliding", GAP, GAP, Duration.ZERO, calls);
            driver = new TopologyTestDriver(builder.build(), props);
            clicks = driver.createInputTopic("clicks", new StringSerializer(), new StringSerializer());
            sessions = driver.createOutputTopic("sessions", new StringDeserializer(), new StringDeserializer());
            sliding = driver.createOutputTopic("sliding", new StringDeserializer(), new StringDeserializer());
        }

        void click(String user, long timestamp) {
            clicks.pipeInput(new TestRecord<>(user, user + ":click", new RecordHeaders(), timestamp));
        }

        void tick(long timestamp, Headers headers) {
            clicks.pipeInput(new TestRecord<>(SENTINEL, null, headers, timestamp));
        }

        void tick(long timestamp) {
            tick(timestamp, Ticks.headers(Ticks.v1("sidecar-a", timestamp)));
        }

        @Override
        public void close() {
            driver.close();
        }
    }

    private static void clicks(Run run) {
        // Stream time ends at 2 000: no session (gap 1 s) is closed yet, and only the sliding windows
        // (1 s, no grace) that end by then.
        run.click("alice", 1_000);
        run.click("bob", 1_100);
        run.click("alice", 1_500);
        run.click("carol", 1_800);
        run.click("alice", 2_000);
    }

    private static List<TestRecord<String, String>> sessionsOf(Run run) {
        return run.sessions.readRecordsToList();
    }

    @Test
    void ticksAloneCloseEverySessionAndSlidingWindowAsDataWould() {
        List<TestRecord<String, String>> byTicks;
        List<TestRecord<String, String>> slidingByTicks;
        try (Run run = new Run(config())) {
            clicks(run);
            assertTrue(run.sessions.isEmpty(), "nothing closed yet");
            List<TestRecord<String, String>> slidingByData = run.sliding.readRecordsToList();
            String callsAfterData = run.calls.toString();
            run.tick(6_000);
            run.tick(8_000);
            assertEquals(callsAfterData, run.calls.toString(), "no user function ran for a tick");
            byTicks = sessionsOf(run);
            List<TestRecord<String, String>> closedByTicks = run.sliding.readRecordsToList();
            assertFalse(closedByTicks.isEmpty(), "ticks closed no sliding window");
            slidingByTicks = concat(slidingByData, closedByTicks);
        }
        List<TestRecord<String, String>> byData;
        List<TestRecord<String, String>> slidingByData;
        try (Run run = new Run(config())) {
            clicks(run);
            run.click("zed", 8_000); // a record of data closes them instead
            byData = withoutZed(sessionsOf(run));
            slidingByData = withoutZed(run.sliding.readRecordsToList());
        }
        assertEquals(Set.of("alice=1000,2000,3", "bob=1100,1100,1", "carol=1800,1800,1"),
                describe(byTicks));
        assertEquals(describe(byData), describe(byTicks));
        assertFalse(slidingByTicks.isEmpty());
        assertEquals(describe(slidingByData), describe(slidingByTicks));
        for (TestRecord<String, String> result : concat(byTicks, slidingByTicks)) {
            assertFalse(result.key().equals(SENTINEL), "a sentinel window: " + result);
            assertNull(result.headers().lastHeader(ProgressControl.HEADER), "a result marked as a tick: " + result);
        }
    }

    @Test
    void ticksFromOneTaskReachTheOtherSideOfTheRepartition() {
        try (Run run = new Run(config())) {
            run.click("alice", 1_000);
            run.tick(3_000);
            assertEquals(Set.of("alice=1000,1000,1"), describe(sessionsOf(run)));
        }
    }

    @Test
    void oneTickFarAheadClosesEverySuppressedWindow() {
        List<TestRecord<String, String>> byTick;
        try (Run run = new Run(config())) {
            clicks(run);
            run.tick(2_000 + Duration.ofMinutes(5).toMillis());
            byTick = run.sliding.readRecordsToList();
        }
        try (Run run = new Run(config())) {
            clicks(run);
            run.click("zed", 8_000);
            assertEquals(describe(withoutZed(run.sliding.readRecordsToList())), describe(byTick));
        }
    }

    @Test
    void aTickFromTheFutureIsSkipped() {
        try (Run run = new Run(config())) {
            clicks(run);
            run.sliding.readRecordsToList(); // closed by the data
            run.tick(System.currentTimeMillis() + Duration.ofMinutes(10).toMillis());
            assertTrue(run.sessions.isEmpty(), "a forged far-future tick closed sessions");
            assertTrue(run.sliding.isEmpty(), "a forged far-future tick closed sliding windows");
        }
    }

    @Test
    void aMalformedControlHeaderIsNeitherTimeNorData() {
        try (Run run = new Run(config())) {
            clicks(run);
            RecordHeaders bad = new RecordHeaders();
            bad.add(ProgressControl.HEADER, "garbage".getBytes(StandardCharsets.UTF_8));
            run.clicks.pipeInput(new TestRecord<>("mallory", "mallory:click", bad, 9_000L));
            assertTrue(run.sessions.isEmpty());
            run.tick(9_000);
            assertFalse(describe(sessionsOf(run)).stream().anyMatch(s -> s.startsWith("mallory")));
        }
    }

    @Test
    void withKeysOnlySignedTicksMoveTime() {
        Properties props = config();
        props.put(TrustPolicy.VERIFICATION_KEYS_CONFIG, "k1:" + SECRET);
        try (Run run = new Run(props)) {
            clicks(run);
            run.tick(8_000); // unsigned
            assertTrue(run.sessions.isEmpty(), "an unsigned tick moved time");
            byte[] forged = Ticks.v2("sidecar-a", 1, "k1", "not-the-secret-at-all".getBytes(StandardCharsets.UTF_8),
                    "clicks", 0, 8_000);
            run.tick(8_000, Ticks.headers(forged));
            assertTrue(run.sessions.isEmpty(), "a badly signed tick moved time");
            byte[] signed = Ticks.v2("sidecar-a", 2, "k1", SECRET.getBytes(StandardCharsets.UTF_8), "clicks", 0, 8_000);
            run.tick(8_000, Ticks.headers(signed));
            assertEquals(3, sessionsOf(run).size());
        }
    }

    @Test
    void filterAndMapValuesPassTicksWithoutCallingTheUserFunction() {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .processValues(Controlled.<String, String>filter((key, value) -> value == null || value.startsWith("keep")))
                .processValues(Controlled.<String, String, String>mapValues(value -> value == null ? "NULL" : value.toUpperCase()))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(), config())) {
            TestInputTopic<String, String> in = driver.createInputTopic("in", new StringSerializer(), new StringSerializer());
            TestOutputTopic<String, String> out = driver.createOutputTopic("out", new StringDeserializer(), new StringDeserializer());
            in.pipeInput(new TestRecord<>("a", "keep me", new RecordHeaders(), 1_000L));
            in.pipeInput(new TestRecord<>("b", "drop me", new RecordHeaders(), 1_100L));
            in.pipeInput(new TestRecord<>("c", null, new RecordHeaders(), 1_200L)); // data, null value
            in.pipeInput(new TestRecord<>(SENTINEL, null, Ticks.headers(Ticks.v1("s", 0)), 2_000L));
            List<TestRecord<String, String>> records = out.readRecordsToList();
            assertEquals(3, records.size());
            assertEquals("KEEP ME", records.get(0).value());
            assertEquals("NULL", records.get(1).value(), "a null value without the header is data");
            assertEquals(SENTINEL, records.get(2).key());
            assertNull(records.get(2).value());
            assertTrue(ProgressControl.isControl(records.get(2).headers()), "the tick goes on, marked");
        }
    }

    @Test
    void withoutControlWindowsRemovesTheSentinelWindowsOfAPlainCount() {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream("in", Consumed.with(Serdes.String(), Serdes.String()))
                .processValues(Controlled.ticksIntoWindows())
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(GAP, Duration.ZERO))
                .emitStrategy(EmitStrategy.onWindowClose())
                .count()
                .toStream()
                .processValues(Controlled.withoutControlWindows())
                .map((window, count) -> new org.apache.kafka.streams.KeyValue<>(window.key(), String.valueOf(count)))
                .to("out", Produced.with(Serdes.String(), Serdes.String()));
        try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(), config())) {
            TestInputTopic<String, String> in = driver.createInputTopic("in", new StringSerializer(), new StringSerializer());
            TestOutputTopic<String, String> out = driver.createOutputTopic("out", new StringDeserializer(), new StringDeserializer());
            in.pipeInput(new TestRecord<>("a", "x", new RecordHeaders(), 1_000L));
            in.pipeInput(new TestRecord<>(SENTINEL, null, Ticks.headers(Ticks.v1("s", 0)), 3_000L));
            in.pipeInput(new TestRecord<>(SENTINEL, null, Ticks.headers(Ticks.v1("s", 1)), 9_000L));
            List<TestRecord<String, String>> records = out.readRecordsToList();
            assertEquals(List.of("a"), records.stream().map(TestRecord::key).toList(), "the sentinel's session is gone");
        }
    }

    @Test
    void theMulticastPartitionerSendsTheTickInScopeEverywhereAndDataAsUsual() {
        MulticastControlPartitioner<String, String> partitioner = new MulticastControlPartitioner<>();
        String tickKey = new String(SENTINEL);
        assertEquals(Optional.empty(), partitioner.partitions("t", tickKey, null, 3), "no tick in scope");
        TickScope.forwarding(tickKey, () -> {
            assertEquals(Optional.of(Set.of(0, 1, 2)), partitioner.partitions("t", tickKey, null, 3));
            assertEquals(Optional.empty(), partitioner.partitions("t", "alice", "alice:x", 3), "data in scope");
        });
        MulticastControlPartitioner<String, String> delegating =
                new MulticastControlPartitioner<>((topic, key, value, n) -> Optional.of(Set.of(1)));
        assertEquals(Optional.of(Set.of(1)), delegating.partitions("t", "alice", "alice:x", 3));
    }

    private static List<TestRecord<String, String>> withoutZed(List<TestRecord<String, String>> records) {
        return records.stream().filter(r -> !r.key().equals("zed")).toList();
    }

    private static Set<String> describe(List<TestRecord<String, String>> records) {
        return records.stream().map(r -> r.key() + "=" + r.value()).collect(Collectors.toSet());
    }

    private static List<TestRecord<String, String>> concat(List<TestRecord<String, String>> a,
                                                           List<TestRecord<String, String>> b) {
        return java.util.stream.Stream.concat(a.stream(), b.stream()).toList();
    }
}
