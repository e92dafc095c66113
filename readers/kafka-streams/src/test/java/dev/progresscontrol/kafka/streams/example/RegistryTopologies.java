package dev.progresscontrol.kafka.streams.example;

import dev.progresscontrol.kafka.streams.Controlled;
import dev.progresscontrol.kafka.streams.ControlledAggregation;
import io.apicurio.registry.serde.avro.AvroSerde;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Windowed;

/**
 * Topologies on a topic whose keys and values are Schema Registry-framed Avro records
 * ({@link GenericRecord}), read and written by Apicurio Registry's Avro serde in Confluent's wire
 * format (Confluent's own serde is not on Maven Central). Writers give ticks on such a topic a null
 * key. Built by {@link TickedWindowsApp} for the properties' {@code topology}:
 *
 * <ul>
 *   <li>{@code registry-copy}: {@code input} copied to {@code output} as it is, through the
 *       registry serdes (records written by confluent-kafka's Avro serializers read, and written
 *       back for its deserializers to read);
 *   <li>{@code registry-sessions}: a session count per input key, suppressed until each session
 *       closes, to {@code output} as {@code <key record>=start,end,count}, Kafka Streams alone;
 *   <li>{@code registry-sessions-controlled}: the same with the companion: ticks read with the
 *       tick key {@code tick.key} ({@link Controlled#keySerde}), into the windows, out of the
 *       results; its user functions throw on anything but a click.
 * </ul>
 *
 * <p>The serdes' settings are the properties named {@code registry.<setting>}; {@code key.schema}
 * is the key's Avro schema and {@code tick.key} the tick key in Avro's JSON encoding.
 */
public final class RegistryTopologies {

    private static final String REGISTRY_PREFIX = "registry.";

    private RegistryTopologies() {
    }

    /** Builds the topology named {@code topology}, taking its own properties out of {@code props}. */
    static void build(String topology, StreamsBuilder builder, Properties props) {
        Map<String, Object> registry = new HashMap<>();
        for (String name : props.stringPropertyNames()) {
            if (name.startsWith(REGISTRY_PREFIX)) {
                registry.put(name.substring(REGISTRY_PREFIX.length()), props.remove(name));
            }
        }
        Serde<GenericRecord> keys = new AvroSerde<>();
        keys.configure(registry, true);
        Serde<GenericRecord> values = new AvroSerde<>();
        values.configure(registry, false);
        String input = (String) props.remove("input");
        String output = (String) props.remove("output");
        switch (topology) {
            case "registry-copy" -> copy(builder, input, output, keys, values);
            case "registry-sessions" -> sessions(builder, input, output, gap(props), grace(props), keys, values);
            case "registry-sessions-controlled" -> {
                Schema keySchema = new Schema.Parser().parse((String) props.remove("key.schema"));
                GenericRecord tickKey = fromJson(keySchema, (String) props.remove("tick.key"));
                controlledSessions(builder, input, output, gap(props), grace(props), keys, values, tickKey,
                        new CallCounts());
            }
            default -> throw new IllegalArgumentException("unknown topology " + topology);
        }
    }

    /** {@code input} to {@code output} unchanged, through the registry serdes. */
    public static void copy(StreamsBuilder builder, String input, String output,
                            Serde<GenericRecord> keys, Serde<GenericRecord> values) {
        builder.stream(input, Consumed.with(keys, values)).to(output, Produced.with(keys, values));
    }

    /**
     * A session count per input key, with nothing of the companion: Kafka Streams drops each
     * null-key tick in the aggregation ("Skipping record due to null key", the task's
     * {@code dropped-records}), so ticks neither count nor close a session.
     */
    public static void sessions(StreamsBuilder builder, String input, String output, Duration gap, Duration grace,
                                Serde<GenericRecord> keys, Serde<GenericRecord> values) {
        builder.stream(input, Consumed.with(keys, values))
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(gap, grace))
                .count(Materialized.with(keys, Serdes.Long()))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .map(RegistryTopologies::describe)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
    }

    /**
     * {@link #sessions} with the companion: ticks read as {@code tickKey} move the aggregation's
     * stream time and close sessions; no user function sees one, no window of {@code tickKey}
     * comes out.
     */
    public static void controlledSessions(StreamsBuilder builder, String input, String output, Duration gap,
                                          Duration grace, Serde<GenericRecord> keys, Serde<GenericRecord> values,
                                          GenericRecord tickKey, CallCounts calls) {
        ControlledAggregation<GenericRecord, GenericRecord, Long> counting = Controlled.aggregation(
                () -> {
                    calls.initializer.incrementAndGet();
                    return 0L;
                },
                (key, click, count) -> {
                    calls.aggregator.incrementAndGet();
                    requireClick(key, click);
                    return count + 1;
                },
                (key, left, right) -> {
                    calls.merger.incrementAndGet();
                    requireClick(key, null);
                    return left + right;
                });
        builder.stream(input, Consumed.with(Controlled.keySerde(keys, tickKey), values))
                .processValues(Controlled.ticksIntoWindows())
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(gap, grace))
                .aggregate(counting.initializer(), counting.aggregator(), counting.merger(),
                        Materialized.with(keys, Serdes.Long()))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .processValues(Controlled.withoutControlWindows(tickKey))
                .map(RegistryTopologies::describe)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
    }

    /** Throws unless {@code key} is a record and {@code click} (when given) a record with a page. */
    static void requireClick(Object key, Object click) {
        boolean keyed = key instanceof GenericRecord;
        boolean clicked = click == null || click instanceof GenericRecord record && record.hasField("page");
        if (!keyed || !clicked) {
            throw new IllegalStateException("a user function was called with a non-click: " + key + " " + click);
        }
    }

    private static KeyValue<String, String> describe(Windowed<GenericRecord> window, Long count) {
        if (count == null) {
            throw new IllegalStateException("a window without a count: " + window);
        }
        return KeyValue.pair(window.key().toString(),
                window.window().start() + "," + window.window().end() + "," + count);
    }

    private static Duration gap(Properties props) {
        return Duration.ofMillis(Long.parseLong((String) props.remove("gap.ms")));
    }

    private static Duration grace(Properties props) {
        return Duration.ofMillis(Long.parseLong((String) props.remove("grace.ms")));
    }

    static GenericRecord fromJson(Schema schema, String json) {
        try {
            return new GenericDatumReader<GenericRecord>(schema).read(null, DecoderFactory.get().jsonDecoder(schema, json));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
