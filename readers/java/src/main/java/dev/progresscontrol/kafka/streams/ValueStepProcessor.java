package dev.progresscontrol.kafka.streams;

import java.util.function.BiFunction;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * {@link Controlled#filter} and {@link Controlled#mapValues}: the user's function for data; a
 * tick passes unchanged, with a null value.
 */
final class ValueStepProcessor<K, V, VR> implements FixedKeyProcessor<K, V, VR> {

    private final BiFunction<K, V, ? extends VR> step;
    private final boolean nullDrops;
    private final TickClassifier classifier = new TickClassifier();
    private FixedKeyProcessorContext<K, VR> context;

    /** {@code nullDrops}: a null result means "drop the record" (a filter), not "forward null". */
    ValueStepProcessor(BiFunction<K, V, ? extends VR> step, boolean nullDrops) {
        this.step = step;
        this.nullDrops = nullDrops;
    }

    @Override
    public void init(FixedKeyProcessorContext<K, VR> context) {
        this.context = context;
        classifier.init(context);
    }

    @Override
    public void process(FixedKeyRecord<K, V> record) {
        switch (classifier.classify(record.headers(), record.timestamp())) {
            case DATA -> {
                VR result = step.apply(record.key(), record.value());
                if (result != null || !nullDrops) {
                    context.forward(record.withValue(result));
                }
            }
            case TICK -> {
                FixedKeyRecord<K, VR> tick = record.withValue(null);
                TickScope.forwarding(record.key(), () -> context.forward(tick));
            }
            case SKIP -> { }
        }
    }
}
