package dev.progresscontrol.kafka.streams;

import dev.progresscontrol.core.ControlRecordValidator;
import dev.progresscontrol.core.TrustPolicy;
import dev.progresscontrol.core.Verdict;
import java.util.Optional;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.streams.processor.api.ProcessingContext;
import org.apache.kafka.streams.processor.api.RecordMetadata;

/**
 * Decides, in one processor, whether the record at hand is data, a control record that may move
 * time, or a control record to skip. Trust rules ({@link TrustPolicy}) come from the
 * application's configs; records read back from this application's own repartition topics are
 * trusted once their header parses, since the tick was checked where it entered the application
 * (and its signature, bound to the source topic and partition, cannot verify there).
 */
final class TickClassifier {

    enum Kind { DATA, TICK, SKIP }

    private ControlRecordValidator validator;
    private String internalPrefix;
    private ProcessingContext context;

    void init(ProcessingContext context) {
        this.context = context;
        this.validator = new ControlRecordValidator(TrustPolicy.fromConfigs(context.appConfigs()));
        this.internalPrefix = context.applicationId() + "-";
    }

    Kind classify(Headers headers, long timestampMs) {
        if (!ProgressControl.hasControlHeader(headers)) {
            return Kind.DATA;
        }
        Optional<RecordMetadata> metadata = context.recordMetadata();
        String topic = metadata.map(RecordMetadata::topic).orElse("");
        int partition = metadata.map(RecordMetadata::partition).orElse(-1);
        if (topic.startsWith(internalPrefix) && topic.endsWith("-repartition")) {
            return ProgressControl.isControl(headers) ? Kind.TICK : Kind.SKIP;
        }
        return validator.check(topic, partition, timestampMs, ProgressControl.headerValues(headers)) == Verdict.ACCEPTED ? Kind.TICK : Kind.SKIP;
    }

    ControlRecordValidator validator() {
        return validator;
    }
}
