package dev.progresscontrol.kafka.streams;

import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/** {@link Controlled#ticksIntoWindows()}: a tick's value becomes {@link Controlled#TICK}. */
final class TicksIntoWindowsProcessor<K, V> implements FixedKeyProcessor<K, V, V> {

    private final TickClassifier classifier = new TickClassifier();
    private FixedKeyProcessorContext<K, V> context;

    @Override
    public void init(FixedKeyProcessorContext<K, V> context) {
        this.context = context;
        classifier.init(context);
    }

    @Override
    @SuppressWarnings("unchecked")
    public void process(FixedKeyRecord<K, V> record) {
        switch (classifier.classify(record.headers(), record.timestamp())) {
            case DATA -> context.forward(record);
            case TICK -> context.forward(record.withValue((V) Controlled.TICK));
            case SKIP -> { }
        }
    }
}
