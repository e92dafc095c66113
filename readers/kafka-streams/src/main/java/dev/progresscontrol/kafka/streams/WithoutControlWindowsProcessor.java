package dev.progresscontrol.kafka.streams;

import java.util.Objects;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * {@link Controlled#withoutControlWindows()}: drops windows of the sentinel key; forwards the
 * others without a {@code progress-control} header (they are results, i.e. data).
 */
final class WithoutControlWindowsProcessor<K, V> implements FixedKeyProcessor<Windowed<K>, V, V> {

    private final K sentinel;
    private FixedKeyProcessorContext<Windowed<K>, V> context;

    /** {@code sentinel}: {@code null} for the default sentinel (string or bytes). */
    WithoutControlWindowsProcessor(K sentinel) {
        this.sentinel = sentinel;
    }

    @Override
    public void init(FixedKeyProcessorContext<Windowed<K>, V> context) {
        this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<Windowed<K>, V> record) {
        K key = record.key() == null ? null : record.key().key();
        boolean controlWindow = sentinel == null ? ProgressControl.isDefaultSentinel(key) : Objects.equals(sentinel, key);
        if (controlWindow) {
            return;
        }
        if (ProgressControl.hasControlHeader(record.headers())) {
            Headers data = new RecordHeaders(record.headers().toArray());
            data.remove(ProgressControl.HEADER);
            context.forward(record.withHeaders(data));
        } else {
            context.forward(record);
        }
    }
}
