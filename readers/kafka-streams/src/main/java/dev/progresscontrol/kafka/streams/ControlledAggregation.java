package dev.progresscontrol.kafka.streams;

import java.util.Objects;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Initializer;
import org.apache.kafka.streams.kstream.Merger;

/**
 * A user's initializer, aggregator and (for sessions) merger, wrapped so that a tick (the value
 * {@link Controlled#ticksIntoWindows()} gives control records) never reaches them.
 *
 * <p>How a tick goes through a windowed aggregation ({@code KStreamSessionWindowAggregate},
 * {@code KStreamWindowAggregate}, {@code KStreamSlidingWindowAggregate}): the processor moves its
 * stream time to the tick's timestamp first (emitting the windows that closes), then asks
 * {@link #initializer()} for a new aggregate, which is null (the user's initializer is not
 * called), and {@link #aggregator()}, which returns null for a tick. Window and session stores
 * treat a null aggregate as a delete, so the sentinel key (or the tick key of
 * {@link Controlled#keySerde}) never has a window to emit, and what
 * the aggregation forwards for it downstream (eager emission, suppression) has no value.
 *
 * <p>For data, a null aggregate means "new window", exactly as in Kafka Streams (whose stores
 * hold no null aggregates): the aggregator and the merger replace it by the user's initial value
 * before calling the user's function, so results are the same as without the wrappers.
 */
public final class ControlledAggregation<K, V, VA> {

    private final Initializer<VA> initializer;
    private final Aggregator<? super K, ? super V, VA> aggregator;
    private final Merger<? super K, VA> merger;

    ControlledAggregation(
            Initializer<VA> initializer, Aggregator<? super K, ? super V, VA> aggregator, Merger<? super K, VA> merger) {
        this.initializer = Objects.requireNonNull(initializer, "initializer");
        this.aggregator = Objects.requireNonNull(aggregator, "aggregator");
        this.merger = merger;
    }

    /** The initializer to pass to {@code aggregate}: null, never the user's function. */
    public Initializer<VA> initializer() {
        return () -> null;
    }

    /** The aggregator to pass to {@code aggregate}: the user's, for data only. */
    public Aggregator<K, V, VA> aggregator() {
        return (key, value, aggregate) -> {
            if (value == Controlled.TICK) {
                return null;
            }
            return aggregator.apply(key, value, real(aggregate));
        };
    }

    /** The session merger to pass to {@code aggregate}: the user's, with real aggregates only. */
    public Merger<K, VA> merger() {
        if (merger == null) {
            throw new IllegalStateException("no merger given to Controlled.aggregation");
        }
        return (key, left, right) -> merger.apply(key, real(left), real(right));
    }

    private VA real(VA aggregate) {
        return aggregate == null ? initializer.apply() : aggregate;
    }
}
