package dev.progresscontrol.kafka.streams.example;

import dev.progresscontrol.kafka.streams.Controlled;
import dev.progresscontrol.kafka.streams.ControlledAggregation;
import dev.progresscontrol.kafka.streams.MulticastControlPartitioner;
import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The example topology of the companion's tests, on one input of clicks (key: anything; value:
 * {@code "<user>:<anything>"}):
 *
 * <ol>
 *   <li>sessions: key by user (a {@code selectKey} before a repartition), count clicks per
 *       session, emitted when the session closes, to {@code sessionsOutput} as
 *       {@code user -> "start,end,count"};
 *   <li>sliding: count clicks per user key (the input key) in sliding windows, suppressed until
 *       the window closes, to {@code slidingOutput} likewise.
 * </ol>
 *
 * <p>Every user function throws when it sees something that is not a click, so a control record
 * reaching one fails the application.
 */
public final class TickedWindows {

    private TickedWindows() {
    }

    /** The user's key selector: the part of the value before ':' (throws on a null value). */
    static String userOf(String click) {
        requireClick(click);
        return click.substring(0, click.indexOf(':'));
    }

    static void requireClick(Object value) {
        if (!(value instanceof String click) || click.indexOf(':') < 0) {
            throw new IllegalStateException("a user function was called with a non-click: " + value);
        }
    }

    /** Counting, with functions that throw on anything but a click (and count their calls). */
    static ControlledAggregation<String, String, Long> counting(CallCounts calls) {
        return Controlled.aggregation(
                () -> {
                    calls.initializer.incrementAndGet();
                    return 0L;
                },
                (user, click, count) -> {
                    calls.aggregator.incrementAndGet();
                    requireClick(click);
                    if (count == null) {
                        throw new IllegalStateException("aggregator called without an aggregate");
                    }
                    return count + 1;
                },
                (user, left, right) -> {
                    calls.merger.incrementAndGet();
                    return left + right;
                });
    }

    public static void build(StreamsBuilder builder, String input, String sessionsOutput, String slidingOutput,
                             Duration gap, Duration difference, Duration grace, CallCounts calls) {
        KStream<String, String> clicks = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        ControlledAggregation<String, String, Long> counting = counting(calls);

        clicks.process(Controlled.selectKey((key, click) -> userOf(click)))
                .repartition(Repartitioned.with(Serdes.String(), Serdes.String())
                        .withName("by-user")
                        .withStreamPartitioner(new MulticastControlPartitioner<>()))
                .processValues(Controlled.ticksIntoWindows())
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(gap, grace))
                .emitStrategy(EmitStrategy.onWindowClose())
                .aggregate(counting.initializer(), counting.aggregator(), counting.merger(),
                        Materialized.<String, Long, SessionStore<Bytes, byte[]>>as("sessions")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .processValues(Controlled.withoutControlWindows())
                .map(TickedWindows::describe)
                .to(sessionsOutput, Produced.with(Serdes.String(), Serdes.String()));

        clicks.processValues(Controlled.ticksIntoWindows())
                .groupByKey()
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(difference, grace))
                .aggregate(counting.initializer(), counting.aggregator(),
                        Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("sliding")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .processValues(Controlled.withoutControlWindows())
                .map(TickedWindows::describe)
                .to(slidingOutput, Produced.with(Serdes.String(), Serdes.String()));
    }

    private static KeyValue<String, String> describe(Windowed<String> window, Long count) {
        if (count == null) {
            throw new IllegalStateException("a window without a count: " + window);
        }
        return KeyValue.pair(window.key(), window.window().start() + "," + window.window().end() + "," + count);
    }
}
