package dev.progresscontrol.kafka.streams;

import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link Controlled#ticksIntoWindows()}: a tick's value becomes {@link Controlled#TICK}.
 *
 * <p>A tick no newer than every record this processor (one per task) has passed on cannot move
 * the stream time of the aggregation after it, so it is dropped here: after a repartition, every
 * upstream task multicasts its ticks, and the older copies would otherwise each be logged and
 * counted by Kafka Streams as a record dropped for an expired window.
 *
 * <p>A tick with a null key (read without {@link Controlled#keySerde}) goes on, but the
 * aggregation after it will drop it: logged once per task, as a hint.
 */
final class TicksIntoWindowsProcessor<K, V> implements FixedKeyProcessor<K, V, V> {

    private static final Logger LOG = LoggerFactory.getLogger(TicksIntoWindowsProcessor.class);

    private final TickClassifier classifier = new TickClassifier();
    private FixedKeyProcessorContext<K, V> context;
    private long latest = Long.MIN_VALUE;
    private boolean warnedNullKey;

    @Override
    public void init(FixedKeyProcessorContext<K, V> context) {
        this.context = context;
        classifier.init(context);
    }

    @Override
    @SuppressWarnings("unchecked")
    public void process(FixedKeyRecord<K, V> record) {
        switch (classifier.classify(record.headers(), record.timestamp())) {
            case DATA -> {
                latest = Math.max(latest, record.timestamp());
                context.forward(record);
            }
            case TICK -> {
                if (record.key() == null && !warnedNullKey) {
                    warnedNullKey = true;
                    LOG.warn("A progress-control tick with a null key reached ticksIntoWindows (topic {}): Kafka "
                            + "Streams' windowed aggregations drop null-key records before they move stream time, so "
                            + "null-key ticks close no window. Read the topic's keys with Controlled.keySerde(serde, "
                            + "tickKey). Logged once per task.",
                            context.recordMetadata().map(m -> m.topic()).orElse("unknown"));
                }
                if (record.timestamp() > latest) {
                    latest = record.timestamp();
                    context.forward(record.withValue((V) Controlled.TICK));
                }
            }
            case SKIP -> { }
        }
    }
}
