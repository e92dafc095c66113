package dev.progresscontrol.kafka.streams;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * {@link Controlled#keySerde}: the user's key serde, except that a record carrying a
 * {@code progress-control} header deserializes to {@code tickKey}, whatever its key bytes, without
 * calling the user's deserializer.
 *
 * <p>Why: on topics whose keys are Schema Registry-framed, ticks have a null key (a registry key
 * deserializer fails on the sentinel), and Kafka Streams' windowed aggregations drop a record with
 * a null key before it moves their stream time ({@code KStreamSessionWindowAggregate},
 * {@code KStreamWindowAggregate}, {@code KStreamSlidingWindowAggregate}: "Skipping record due to
 * null key", counted in the task's {@code dropped-records}). Giving the tick a key of the user's
 * type where the record is read keeps the topology as it is: a processor changing keys
 * ({@code process}) would make the next {@code groupByKey} repartition. Kafka Streams passes the
 * record's headers to a source's key deserializer ({@code SourceNode.deserializeKey}).
 *
 * <p>Which records are ticks, and which may move time, is still decided downstream by the
 * companion's processors ({@link TickClassifier}); a record with a malformed or untrusted header
 * gets the tick key here and is skipped there. Serializing is the user's serde's, {@code tickKey}
 * included (stores delete its windows; after {@link Controlled#selectKey(org.apache.kafka.streams.kstream.KeyValueMapper, Object)}
 * it crosses a repartition topic).
 */
final class TickKeySerde<K> implements Serde<K> {

    private final Serde<K> inner;
    private final K tickKey;

    TickKeySerde(Serde<K> inner, K tickKey) {
        this.inner = Objects.requireNonNull(inner, "keySerde");
        this.tickKey = Objects.requireNonNull(tickKey, "tickKey");
    }

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
        inner.configure(configs, isKey);
    }

    @Override
    public void close() {
        inner.close();
    }

    @Override
    public Serializer<K> serializer() {
        return inner.serializer();
    }

    @Override
    public Deserializer<K> deserializer() {
        return new TickKeyDeserializer<>(inner.deserializer(), tickKey);
    }

    private static final class TickKeyDeserializer<K> implements Deserializer<K> {

        private final Deserializer<K> inner;
        private final K tickKey;

        TickKeyDeserializer(Deserializer<K> inner, K tickKey) {
            this.inner = inner;
            this.tickKey = tickKey;
        }

        @Override
        public void configure(Map<String, ?> configs, boolean isKey) {
            inner.configure(configs, isKey);
        }

        @Override
        public K deserialize(String topic, byte[] data) {
            return inner.deserialize(topic, data);
        }

        @Override
        public K deserialize(String topic, Headers headers, byte[] data) {
            return ProgressControl.hasControlHeader(headers) ? tickKey : inner.deserialize(topic, headers, data);
        }

        @Override
        public K deserialize(String topic, Headers headers, ByteBuffer data) {
            return ProgressControl.hasControlHeader(headers) ? tickKey : inner.deserialize(topic, headers, data);
        }

        @Override
        public void close() {
            inner.close();
        }
    }
}
