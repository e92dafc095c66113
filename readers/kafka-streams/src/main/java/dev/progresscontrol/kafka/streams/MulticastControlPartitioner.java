package dev.progresscontrol.kafka.streams;

import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.streams.processor.StreamPartitioner;

/**
 * A {@link StreamPartitioner} that sends a control record to every partition of a repartition
 * (or output) topic and partitions everything else as {@code delegate} does (by default, as Kafka
 * Streams does: murmur2 of the serialized key). Without it, every tick after a
 * {@code selectKey}/{@code groupBy} goes to the one partition its sentinel key hashes to and the
 * other partitions' stream time never moves.
 *
 * <p>A partitioner sees no headers, so it recognises the control record a {@link Controlled}
 * processor (e.g. {@link Controlled#selectKey}) is forwarding at that moment: use it downstream
 * of one, e.g.
 * {@code .process(Controlled.selectKey(mapper)).repartition(Repartitioned.streamPartitioner(new MulticastControlPartitioner<>()))}.
 */
public final class MulticastControlPartitioner<K, V> implements StreamPartitioner<K, V> {

    private final StreamPartitioner<? super K, ? super V> delegate;

    /** Data partitioned as Kafka Streams does by default. */
    public MulticastControlPartitioner() {
        this(null);
    }

    /** Data partitioned by {@code delegate} ({@code null}: Kafka Streams' default). */
    public MulticastControlPartitioner(StreamPartitioner<? super K, ? super V> delegate) {
        this.delegate = delegate;
    }

    @Override
    public Optional<Set<Integer>> partitions(String topic, K key, V value, int numPartitions) {
        if (TickScope.isCurrentTick(key, value)) {
            return Optional.of(IntStream.range(0, numPartitions).boxed().collect(Collectors.toSet()));
        }
        return delegate == null ? Optional.empty() : delegate.partitions(topic, key, value, numPartitions);
    }
}
