package dev.progresscontrol.flink;

import java.time.Duration;
import org.apache.flink.api.common.eventtime.TimestampAssigner;
import org.apache.flink.api.common.eventtime.TimestampAssignerSupplier;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkAlignmentParams;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkGeneratorSupplier;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.types.Either;

/**
 * Watermark strategies for streams of {@link ProgressControlDeserializationSchema}'s output: data
 * ({@code Either.Left}) goes to the application's strategy, a validated tick at {@code T} ({@code
 * Either.Right}) makes the watermark {@code T - 1} (a tick promises that no record older than
 * {@code T} follows; a record at exactly {@code T} may).
 *
 * <p>Used with {@code env.fromSource} (or {@link ProgressControl#fromSource}), Flink's FLIP-27
 * source runs one generator per split, i.e. per Kafka partition, and the source's watermark is
 * the minimum over its partitions: a tick moves only its own partition's time, and an idle
 * partition no longer holds the others back once it is ticked. No processing-time idleness is
 * involved, so results do not depend on timing. Watermarks never go back: a lower one from the
 * application's generator after a tick is not emitted.
 */
public final class ProgressControlWatermarks {
    private ProgressControlWatermarks() {}

    /** {@link WatermarkStrategy#forBoundedOutOfOrderness} for data, plus ticks. */
    public static <T> WatermarkStrategy<Either<T, Long>> forBoundedOutOfOrderness(
            Duration maxOutOfOrderness) {
        return wrap(WatermarkStrategy.<T>forBoundedOutOfOrderness(maxOutOfOrderness));
    }

    /** {@link WatermarkStrategy#forMonotonousTimestamps} for data, plus ticks. */
    public static <T> WatermarkStrategy<Either<T, Long>> forMonotonousTimestamps() {
        return wrap(WatermarkStrategy.<T>forMonotonousTimestamps());
    }

    /**
     * The application's strategy (its generator and timestamp assigner for data, its watermark
     * alignment) with ticks on top.
     */
    public static <T> WatermarkStrategy<Either<T, Long>> wrap(WatermarkStrategy<T> dataStrategy) {
        return new TickStrategy<>(dataStrategy);
    }

    private static final class TickStrategy<T> implements WatermarkStrategy<Either<T, Long>> {
        private static final long serialVersionUID = 1L;
        private final WatermarkStrategy<T> data;

        TickStrategy(WatermarkStrategy<T> data) {
            this.data = data;
        }

        @Override
        public WatermarkGenerator<Either<T, Long>> createWatermarkGenerator(
                WatermarkGeneratorSupplier.Context context) {
            return new TickWatermarkGenerator<>(data.createWatermarkGenerator(context));
        }

        @Override
        public TimestampAssigner<Either<T, Long>> createTimestampAssigner(
                TimestampAssignerSupplier.Context context) {
            TimestampAssigner<T> assigner = data.createTimestampAssigner(context);
            return (element, recordTimestamp) -> element.isRight()
                    ? element.right()
                    : assigner.extractTimestamp(element.left(), recordTimestamp);
        }

        @Override
        public WatermarkAlignmentParams getAlignmentParameters() {
            return data.getAlignmentParameters();
        }
    }

    /**
     * One partition's generator: ticks set the watermark, data goes to the application's
     * generator; whatever either emits passes only when it moves the watermark forward.
     */
    static final class TickWatermarkGenerator<T> implements WatermarkGenerator<Either<T, Long>> {
        private final WatermarkGenerator<T> data;
        private final ForwardOnly output = new ForwardOnly();

        TickWatermarkGenerator(WatermarkGenerator<T> data) {
            this.data = data;
        }

        @Override
        public void onEvent(Either<T, Long> event, long eventTimestamp, WatermarkOutput target) {
            output.target = target;
            if (event.isRight()) {
                output.emitWatermark(new Watermark(event.right() - 1));
            } else {
                data.onEvent(event.left(), eventTimestamp, output);
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput target) {
            output.target = target;
            data.onPeriodicEmit(output);
        }
    }

    /** Passes on only watermarks above the highest one passed so far (and idleness as is). */
    private static final class ForwardOnly implements WatermarkOutput {
        private WatermarkOutput target;
        private long highest = Long.MIN_VALUE;

        @Override
        public void emitWatermark(Watermark watermark) {
            if (watermark.getTimestamp() > highest) {
                highest = watermark.getTimestamp();
                target.emitWatermark(watermark);
            }
        }

        @Override
        public void markIdle() {
            target.markIdle();
        }

        @Override
        public void markActive() {
            target.markActive();
        }
    }
}
