package dev.progresscontrol.kafka.streams;

import dev.progresscontrol.core.TrustPolicy;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Initializer;
import org.apache.kafka.streams.kstream.KeyValueMapper;
import org.apache.kafka.streams.kstream.Merger;
import org.apache.kafka.streams.kstream.Predicate;
import org.apache.kafka.streams.kstream.ValueMapper;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorSupplier;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;

/**
 * Kafka Streams DSL helpers that let control records (ticks) move windowed operators' stream time
 * while no user function ever sees one.
 *
 * <p>Headers are only visible to processors, so the helpers come in two kinds: processors
 * (used with {@code process}/{@code processValues}) that recognise ticks by their header and pass
 * them around the user's function; and aggregation wrappers
 * ({@link #aggregation}) that skip the user's functions for the tick value
 * {@link #ticksIntoWindows()} puts in place. A windowed aggregation then processes the tick as
 * one of the sentinel key: its stream time moves (closing every window due), the user's
 * functions are not called, and the tick's aggregate is null, which the window store treats as a
 * delete: the sentinel key never has a window. For example (session count by user):
 *
 * <pre>{@code
 * ControlledAggregation<String, String, Long> counting =
 *     Controlled.aggregation(() -> 0L, (user, click, n) -> n + 1, (user, a, b) -> a + b);
 * builder.stream("clicks", Consumed.with(Serdes.String(), Serdes.String()))
 *     .process(Controlled.selectKey((key, value) -> userOf(value)))
 *     .repartition(Repartitioned.<String, String>streamPartitioner(new MulticastControlPartitioner<>()))
 *     .processValues(Controlled.ticksIntoWindows())
 *     .groupByKey()
 *     .windowedBy(SessionWindows.ofInactivityGapAndGrace(gap, grace))
 *     .emitStrategy(EmitStrategy.onWindowClose())
 *     .aggregate(counting.initializer(), counting.aggregator(), counting.merger(),
 *                Materialized.with(Serdes.String(), Serdes.Long()))
 *     .toStream()
 *     .processValues(Controlled.withoutControlWindows())
 *     .to("sessions", ...);
 * }</pre>
 *
 * <p>On a topic whose ticks have a null key (Schema Registry-framed keys), read the keys with
 * {@link #keySerde(Serde, Object)}, which gives ticks a placeholder key of your type, and drop
 * its windows with {@link #withoutControlWindows(Object)}.
 *
 * <p>Trust: processors read {@link TrustPolicy}'s {@code progress.control.*} entries from the
 * application's configs and skip (never forward) control records that fail them.
 */
public final class Controlled {

    private Controlled() {
    }

    /** The value {@link #ticksIntoWindows()} gives a tick (never serialized, never stored). */
    static final Object TICK = new Object() {
        @Override
        public String toString() {
            return "progress-control tick";
        }
    };

    /**
     * {@code selectKey} that passes ticks through with their own key (a {@code String} or
     * {@code byte[]} sentinel; use {@link #selectKey(KeyValueMapper, Object)} for other key
     * types), for {@code stream.process(...)}. Follow it with a repartition using
     * {@link MulticastControlPartitioner} so each tick reaches every partition.
     */
    public static <K, V, KR> ProcessorSupplier<K, V, KR, V> selectKey(KeyValueMapper<? super K, ? super V, ? extends KR> mapper) {
        return () -> new SelectKeyProcessor<>(mapper, null);
    }

    /** {@link #selectKey(KeyValueMapper)} giving ticks the key {@code sentinel} (of the new key type). */
    public static <K, V, KR> ProcessorSupplier<K, V, KR, V> selectKey(
            KeyValueMapper<? super K, ? super V, ? extends KR> mapper, KR sentinel) {
        return () -> new SelectKeyProcessor<>(mapper, sentinel);
    }

    /** {@code filter} for {@code processValues}: ticks always pass, so a filter never stops time. */
    public static <K, V> FixedKeyProcessorSupplier<K, V, V> filter(Predicate<? super K, ? super V> predicate) {
        return () -> new ValueStepProcessor<K, V, V>(predicate::test, (key, value) -> value);
    }

    /** {@code mapValues} for {@code processValues}: ticks pass unchanged (null value). */
    public static <K, V, VR> FixedKeyProcessorSupplier<K, V, VR> mapValues(ValueMapper<? super V, ? extends VR> mapper) {
        return () -> new ValueStepProcessor<K, V, VR>((key, value) -> true, (key, value) -> mapper.apply(value));
    }

    /**
     * For {@code processValues} right before {@code groupByKey().windowedBy(...)}: gives each
     * tick a placeholder value, so sliding windows (which drop null values before they move
     * stream time) process it too, and the wrappers below recognise it. Place it after any
     * repartition: the placeholder cannot be serialized.
     */
    public static <K, V> FixedKeyProcessorSupplier<K, V, V> ticksIntoWindows() {
        return TicksIntoWindowsProcessor::new;
    }

    /**
     * The key serde to read a topic with whose ticks' keys are not of your key type, for
     * {@code Consumed.with(...)}: on topics with Schema Registry-framed keys, writers give ticks a
     * null key, which Kafka Streams' windowed aggregations drop before it moves their stream
     * time. Every record carrying a {@code progress-control} header is read as {@code tickKey}, a
     * value of your key type that no data record has, whatever its key bytes (null, or the
     * sentinel that a registry deserializer would fail on); every other record as
     * {@code keySerde} reads it. Pass the same {@code tickKey} to
     * {@link #withoutControlWindows(Object)} (and, changing keys, give the new key type's to
     * {@link #selectKey(KeyValueMapper, Object)}). Serializing is {@code keySerde}'s. Kafka Streams
     * does not configure a serde given in {@code Consumed}: configure {@code keySerde} (or this).
     */
    public static <K> Serde<K> keySerde(Serde<K> keySerde, K tickKey) {
        return new TickKeySerde<>(keySerde, tickKey);
    }

    /**
     * The user's aggregation functions, wrapped so that a tick never reaches them: use
     * {@link ControlledAggregation#initializer()}, {@link ControlledAggregation#aggregator()} and
     * (sessions) {@link ControlledAggregation#merger()} in {@code aggregate(...)}.
     */
    public static <K, V, VA> ControlledAggregation<K, V, VA> aggregation(
            Initializer<VA> initializer, Aggregator<? super K, ? super V, VA> aggregator) {
        return new ControlledAggregation<>(initializer, aggregator, null);
    }

    /** {@link #aggregation(Initializer, Aggregator)} with a session merger. */
    public static <K, V, VA> ControlledAggregation<K, V, VA> aggregation(
            Initializer<VA> initializer, Aggregator<? super K, ? super V, VA> aggregator, Merger<? super K, VA> merger) {
        return new ControlledAggregation<>(initializer, aggregator, merger);
    }

    /**
     * For {@code processValues} on a windowed aggregation's output stream: drops windows of the
     * default sentinel key (an aggregation without {@link #aggregation} wrappers, e.g.
     * {@code count()}, has them) and removes the {@code progress-control} header from the
     * results. Kafka Streams stamps results emitted while it processes a tick with the tick's
     * headers; without this, every reader of the output would take them for control records.
     */
    public static <K, V> FixedKeyProcessorSupplier<Windowed<K>, V, V> withoutControlWindows() {
        return () -> new WithoutControlWindowsProcessor<>(null);
    }

    /** {@link #withoutControlWindows()} for a sentinel key of another type. */
    public static <K, V> FixedKeyProcessorSupplier<Windowed<K>, V, V> withoutControlWindows(K sentinel) {
        return () -> new WithoutControlWindowsProcessor<>(sentinel);
    }
}
