package dev.progresscontrol.kafka.streams;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.progresscontrol.kafka.streams.example.CallCounts;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.IntegerSerializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.errors.StreamsException;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/**
 * Ticks whose key is not of the user's key type (null on Schema Registry-keyed topics, or the
 * sentinel on a strict key serde), with and without {@link Controlled#keySerde}, on Kafka Streams'
 * own session aggregation and suppression (TopologyTestDriver). Keys are integers, read by Kafka's
 * {@code IntegerDeserializer}, which, like a registry deserializer, passes null through and fails
 * on the 20-byte sentinel.
 */
class TickKeysTest {

    private static final int TICK_KEY = -1;
    private static final Duration GAP = Duration.ofMillis(1_000);
    private static final byte[] SENTINEL = ProgressControl.DEFAULT_SENTINEL_KEY.getBytes(StandardCharsets.UTF_8);
    private static final Set<String> SESSIONS = Set.of("1=1000,2000,3", "2=1100,1100,1", "3=1800,1800,1");

    private static Properties config() {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "tick-keys-test");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        return props;
    }

    /** A session count per key, suppressed until the session closes, to "sessions". */
    private static final class Run implements AutoCloseable {
        final CallCounts calls;
        final TopologyTestDriver driver;
        final TestInputTopic<byte[], String> clicks;
        final TestOutputTopic<String, String> sessions;

        /** Kafka Streams alone: {@code count()} on the clicks' own keys. */
        static Run plain() {
            return new Run(new CallCounts(), builder -> {
                builder.stream("clicks", Consumed.with(Serdes.Integer(), Serdes.String()))
                        .groupByKey()
                        .windowedBy(SessionWindows.ofInactivityGapAndGrace(GAP, Duration.ZERO))
                        .count(Materialized.with(Serdes.Integer(), Serdes.Long()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                        .toStream()
                        .map(TickKeysTest::describe)
                        .to("sessions", Produced.with(Serdes.String(), Serdes.String()));
            });
        }

        /** With the companion: ticks read as {@link #TICK_KEY}, user functions that throw on them. */
        static Run controlled() {
            CallCounts calls = new CallCounts();
            return new Run(calls, builder -> {
                ControlledAggregation<Integer, String, Long> counting = Controlled.aggregation(
                        () -> {
                            calls.initializer.incrementAndGet();
                            return 0L;
                        },
                        (user, click, n) -> {
                            calls.aggregator.incrementAndGet();
                            if (user == null || user == TICK_KEY || !"click".equals(click)) {
                                throw new IllegalStateException("a user function saw " + user + " " + click);
                            }
                            return n + 1;
                        },
                        (user, a, b) -> {
                            calls.merger.incrementAndGet();
                            return a + b;
                        });
                Serde<Integer> keys = Controlled.keySerde(Serdes.Integer(), TICK_KEY);
                KStream<Integer, String> clicks = builder.stream("clicks", Consumed.with(keys, Serdes.String()));
                clicks.processValues(Controlled.ticksIntoWindows())
                        .groupByKey()
                        .windowedBy(SessionWindows.ofInactivityGapAndGrace(GAP, Duration.ZERO))
                        .aggregate(counting.initializer(), counting.aggregator(), counting.merger(),
                                Materialized.with(Serdes.Integer(), Serdes.Long()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                        .toStream()
                        .processValues(Controlled.withoutControlWindows(TICK_KEY))
                        .map(TickKeysTest::describe)
                        .to("sessions", Produced.with(Serdes.String(), Serdes.String()));
            });
        }

        private Run(CallCounts calls, Consumer<StreamsBuilder> topology) {
            this.calls = calls;
            StreamsBuilder builder = new StreamsBuilder();
            topology.accept(builder);
            driver = new TopologyTestDriver(builder.build(), config());
            clicks = driver.createInputTopic("clicks", new ByteArraySerializer(), new StringSerializer());
            sessions = driver.createOutputTopic("sessions", new StringDeserializer(), new StringDeserializer());
        }

        void click(int user, long timestamp) {
            clicks.pipeInput(new TestRecord<>(new IntegerSerializer().serialize("clicks", user), "click",
                    new RecordHeaders(), timestamp));
        }

        /** The clicks of {@link #SESSIONS}: stream time ends at 2 000, no session closed yet. */
        void clicks() {
            click(1, 1_000);
            click(2, 1_100);
            click(1, 1_500);
            click(3, 1_800);
            click(1, 2_000);
        }

        void tick(byte[] key, long timestamp) {
            clicks.pipeInput(new TestRecord<>(key, null, Ticks.headers(Ticks.v1("sidecar-a", timestamp)), timestamp));
        }

        List<TestRecord<String, String>> results() {
            return sessions.readRecordsToList();
        }

        double droppedRecords() {
            return driver.metrics().entrySet().stream()
                    .filter(e -> e.getKey().name().equals("dropped-records-total")
                            && e.getKey().group().equals("stream-task-metrics"))
                    .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue())
                    .sum();
        }

        String userCalls() {
            return calls.toString();
        }

        @Override
        public void close() {
            driver.close();
        }
    }

    @Test
    void withoutTheCompanionKafkaStreamsDropsNullKeyTicksAndOnlyDataClosesSessions() {
        try (Run run = Run.plain()) {
            run.clicks();
            run.tick(null, 6_000);
            run.tick(null, 8_000);
            assertTrue(run.results().isEmpty(), "a null-key tick closed a session");
            assertEquals(2.0, run.droppedRecords(), "Kafka Streams' dropped-records counts each tick");
            run.click(9, 8_000);
            assertEquals(SESSIONS, describe(run.results()), "a tick was counted, or data closed nothing");
        }
    }

    @Test
    void withTheKeySerdeNullKeyTicksCloseEverySessionAsDataWould() {
        Set<String> byData;
        try (Run run = Run.controlled()) {
            run.clicks();
            run.click(9, 8_000);
            byData = describe(run.results());
        }
        try (Run run = Run.controlled()) {
            run.clicks();
            assertTrue(run.results().isEmpty(), "nothing closed yet");
            String callsAfterData = run.userCalls();
            run.tick(null, 6_000);
            run.tick(null, 8_000);
            List<TestRecord<String, String>> byTicks = run.results();
            assertEquals(SESSIONS, describe(byTicks));
            assertEquals(byData, describe(byTicks));
            assertEquals(callsAfterData, run.userCalls(), "a user function ran for a tick");
            assertEquals(0.0, run.droppedRecords(), "Kafka Streams dropped a tick");
            for (TestRecord<String, String> result : byTicks) {
                assertFalse(result.key().equals(String.valueOf(TICK_KEY)), "a window of the tick key: " + result);
                assertNull(result.headers().lastHeader(ProgressControl.HEADER), "a result marked as a tick: " + result);
            }
        }
    }

    @Test
    void theSentinelKeyFailsAStrictKeySerdeButNotTheKeySerde() {
        try (Run run = Run.plain()) {
            run.clicks();
            StreamsException failure = assertThrows(StreamsException.class, () -> run.tick(SENTINEL, 6_000));
            assertTrue(String.valueOf(failure.getMessage()).contains("Deserialization exception handler"),
                    String.valueOf(failure));
        }
        try (Run run = Run.controlled()) {
            run.clicks();
            run.tick(SENTINEL, 6_000);
            assertEquals(SESSIONS, describe(run.results()));
        }
    }

    @Test
    void theKeySerdeReadsDataAndUnmarkedNullKeysAsTheUsersSerdeDoes() {
        Serde<Integer> keys = Controlled.keySerde(Serdes.Integer(), TICK_KEY);
        Deserializer<Integer> reader = keys.deserializer();
        byte[] seven = keys.serializer().serialize("t", 7);
        Headers none = new RecordHeaders();
        Headers tick = Ticks.headers(Ticks.v1("s", 0));
        assertEquals(7, reader.deserialize("t", none, seven));
        assertNull(reader.deserialize("t", none, (byte[]) null), "a null key without the header is data's");
        assertEquals(TICK_KEY, reader.deserialize("t", tick, (byte[]) null));
        assertEquals(TICK_KEY, reader.deserialize("t", tick, SENTINEL));
        assertEquals(TICK_KEY, reader.deserialize("t", tick, seven), "the header decides, not the key");
        assertEquals(7, reader.deserialize("t", seven), "no headers: the user's deserializer");
    }

    private static KeyValue<String, String> describe(Windowed<Integer> window, Long count) {
        return KeyValue.pair(String.valueOf(window.key()), window.window().start() + "," + window.window().end() + "," + count);
    }

    private static Set<String> describe(List<TestRecord<String, String>> records) {
        return records.stream().map(r -> r.key() + "=" + r.value()).collect(Collectors.toSet());
    }
}
