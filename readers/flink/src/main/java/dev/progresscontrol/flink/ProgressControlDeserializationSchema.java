package dev.progresscontrol.flink;

import dev.progresscontrol.core.ControlRecordValidator;
import dev.progresscontrol.core.TrustPolicy;
import dev.progresscontrol.core.Verdict;
import java.io.IOException;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.EitherTypeInfo;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Wraps the application's {@link KafkaRecordDeserializationSchema} so that progress-control ticks
 * (records with the {@code progress-control} header) never reach it: data records are handed to
 * it and come out as {@code Either.Left(value)}; a tick the {@link TrustPolicy} accepts comes out
 * as {@code Either.Right(tick timestamp)}, which {@link ProgressControlWatermarks} turns into the
 * watermark of that tick's partition and {@link ProgressControl#fromSource} drops before any user
 * operator. A tick the policy rejects (malformed, negative or too far in the future, unsigned or
 * forged when keys are set) produces nothing: it is counted and logged once per source and
 * reason, and moves no time.
 *
 * <p>Metrics, under the source reader's group {@code progressControl}: {@code ticksAccepted} and
 * {@code ticksRejected.<reason>} (gauges, per subtask).
 *
 * @param <T> the application's record type
 */
public final class ProgressControlDeserializationSchema<T>
        implements KafkaRecordDeserializationSchema<Either<T, Long>> {
    private static final long serialVersionUID = 1L;

    private final KafkaRecordDeserializationSchema<T> inner;
    private final TrustPolicy policy;
    private final ControlRecordValidator.Clock clock;

    private transient ControlRecordValidator validator;
    private transient ValueCollector<T> values;

    private ProgressControlDeserializationSchema(
            KafkaRecordDeserializationSchema<T> inner,
            TrustPolicy policy,
            ControlRecordValidator.Clock clock) {
        this.inner = inner;
        this.policy = policy;
        this.clock = clock;
    }

    /** Wrap a schema that reads whole Kafka records (key, value, headers...). */
    public static <T> ProgressControlDeserializationSchema<T> wrap(
            KafkaRecordDeserializationSchema<T> inner) {
        return new ProgressControlDeserializationSchema<>(
                inner, TrustPolicy.defaults(), System::currentTimeMillis);
    }

    /** Wrap a schema that reads record values only. */
    public static <T> ProgressControlDeserializationSchema<T> valueOnly(
            DeserializationSchema<T> valueSchema) {
        return wrap(KafkaRecordDeserializationSchema.valueOnly(valueSchema));
    }

    /** The same schema accepting ticks by {@code trustPolicy} (default: {@link TrustPolicy#defaults()}). */
    public ProgressControlDeserializationSchema<T> withTrustPolicy(TrustPolicy trustPolicy) {
        return new ProgressControlDeserializationSchema<>(inner, trustPolicy, clock);
    }

    /** The same schema judging "too far ahead" by another wall clock (milliseconds); for tests. */
    public ProgressControlDeserializationSchema<T> withClock(ControlRecordValidator.Clock wallClockMs) {
        return new ProgressControlDeserializationSchema<>(inner, policy, wallClockMs);
    }

    @Override
    public void open(DeserializationSchema.InitializationContext context) throws Exception {
        inner.open(context);
        validator = new ControlRecordValidator(policy, clock);
        values = new ValueCollector<>();
        MetricGroup group = context.getMetricGroup().addGroup("progressControl");
        group.gauge("ticksAccepted", () -> validator.count(Verdict.ACCEPTED));
        for (Verdict verdict : Verdict.values()) {
            if (verdict != Verdict.ACCEPTED) {
                group.gauge("ticksRejected." + verdict.label(), () -> validator.count(verdict));
            }
        }
    }

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Either<T, Long>> out)
            throws IOException {
        if (!ProgressControl.hasControlHeader(record.headers())) {
            values.target = out;
            inner.deserialize(record, values);
            return;
        }
        if (validator().check(record.topic(), record.partition(), record.timestamp(),
                        ProgressControl.headerValues(record.headers()))
                == Verdict.ACCEPTED) {
            out.collect(Either.Right(record.timestamp()));
        }
    }

    @Override
    public TypeInformation<Either<T, Long>> getProducedType() {
        return new EitherTypeInfo<>(inner.getProducedType(), Types.LONG);
    }

    /** The validator (created in {@link #open}); its counts are this subtask's. */
    public ControlRecordValidator validator() {
        if (validator == null) {
            throw new IllegalStateException("open() was not called");
        }
        return validator;
    }

    /** Hands the application schema's values on as {@code Either.Left}; reused across records. */
    private static final class ValueCollector<T> implements Collector<T> {
        private Collector<Either<T, Long>> target;

        @Override
        public void collect(T value) {
            target.collect(Either.Left(value));
        }

        @Override
        public void close() {
            // The source's collector outlives every record; closing is the source's business.
        }
    }
}
