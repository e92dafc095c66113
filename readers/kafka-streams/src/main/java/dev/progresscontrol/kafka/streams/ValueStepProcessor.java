package dev.progresscontrol.kafka.streams;

import java.util.function.BiFunction;
import java.util.function.BiPredicate;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * {@link Controlled#filter} and {@link Controlled#mapValues}: the user's function for data; a
 * tick passes unchanged, with a null value.
 */
final class ValueStepProcessor<K, V, VR> implements FixedKeyProcessor<K, V, VR> {

    private final BiPredicate<K, V> keep;
    private final BiFunction<K, V, ? extends VR> mapper;
    private final TickClassifier classifier = new TickClassifier();
    private FixedKeyProcessorContext<K, VR> context;

    /** Data records for which {@code keep} holds go on, their value mapped by {@code mapper}. */
    ValueStepProcessor(BiPredicate<K, V> keep, BiFunction<K, V, ? extends VR> mapper) {
        this.keep = keep;
        this.mapper = mapper;
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
                if (keep.test(record.key(), record.value())) {
                    context.forward(record.withValue(mapper.apply(record.key(), record.value())));
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
