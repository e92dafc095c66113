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
 * {@link #initializer()} for a new aggregate, which is a placeholder (the user's initializer is
 * not called), and {@link #aggregator()}, which returns null for a tick. The store treats a null
 * aggregate as a delete, so the sentinel key never has a window to emit. For data, the
 * aggregator replaces the placeholder by the user's initial value before calling the user's
 * aggregator, and the merger does the same before calling the user's merger: results are the
 * same as without the wrappers. The placeholder is never stored: Kafka Streams always applies
 * the aggregator to a new aggregate before it stores it.
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

    /** The initializer to pass to {@code aggregate}: a placeholder, never the user's function. */
    @SuppressWarnings("unchecked")
    public Initializer<VA> initializer() {
        return () -> (VA) Controlled.UNINITIALIZED;
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
        return aggregate == Controlled.UNINITIALIZED ? initializer.apply() : aggregate;
    }
}
