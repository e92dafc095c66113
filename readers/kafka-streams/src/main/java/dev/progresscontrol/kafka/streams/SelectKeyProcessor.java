package dev.progresscontrol.kafka.streams;

import org.apache.kafka.streams.kstream.KeyValueMapper;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;

/** {@link Controlled#selectKey}: data gets the user's key; a tick keeps its sentinel. */
final class SelectKeyProcessor<K, V, KR> implements Processor<K, V, KR, V> {

    private final KeyValueMapper<? super K, ? super V, ? extends KR> mapper;
    private final KR sentinel;
    private final TickClassifier classifier = new TickClassifier();
    private ProcessorContext<KR, V> context;

    SelectKeyProcessor(KeyValueMapper<? super K, ? super V, ? extends KR> mapper, KR sentinel) {
        this.mapper = mapper;
        this.sentinel = sentinel;
    }

    @Override
    public void init(ProcessorContext<KR, V> context) {
        this.context = context;
        classifier.init(context);
    }

    @Override
    @SuppressWarnings("unchecked")
    public void process(Record<K, V> record) {
        switch (classifier.classify(record.headers(), record.timestamp())) {
            case DATA -> context.forward(record.withKey(mapper.apply(record.key(), record.value())));
            case TICK -> {
                // The tick keeps its own key (of the input key type, unless a sentinel is given).
                KR key = sentinel != null ? sentinel : (KR) record.key();
                Record<KR, V> tick = record.withKey(key).withValue(null);
                TickScope.forwarding(key, () -> context.forward(tick));
            }
            case SKIP -> { }
        }
    }
}
