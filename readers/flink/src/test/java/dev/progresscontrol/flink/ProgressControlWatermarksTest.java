package dev.progresscontrol.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.eventtime.TimestampAssigner;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.types.Either;
import org.junit.jupiter.api.Test;

class ProgressControlWatermarksTest {
    /** Records what a generator emits. */
    static final class Output implements WatermarkOutput {
        final List<Long> watermarks = new ArrayList<>();
        int idle;

        @Override
        public void emitWatermark(Watermark watermark) {
            watermarks.add(watermark.getTimestamp());
        }

        @Override
        public void markIdle() {
            idle++;
        }

        @Override
        public void markActive() {}
    }

    private static <T> WatermarkGenerator<Either<T, Long>> generator(
            WatermarkStrategy<Either<T, Long>> strategy) {
        return strategy.createWatermarkGenerator(null);
    }

    @Test
    void aTickMakesTheWatermarkTickMinusOneAtOnce() {
        WatermarkGenerator<Either<String, Long>> generator =
                generator(ProgressControlWatermarks.forBoundedOutOfOrderness(Duration.ofMillis(100)));
        Output out = new Output();
        generator.onEvent(Either.Left("a"), 1_000, out);
        generator.onPeriodicEmit(out);
        generator.onEvent(Either.Right(5_000L), 5_000, out);
        assertEquals(List.of(1_000L - 100 - 1, 4_999L), out.watermarks);
    }

    @Test
    void watermarksNeverGoBack() {
        WatermarkGenerator<Either<String, Long>> generator =
                generator(ProgressControlWatermarks.forBoundedOutOfOrderness(Duration.ofMillis(100)));
        Output out = new Output();
        generator.onEvent(Either.Right(5_000L), 5_000, out);
        generator.onEvent(Either.Left("late-but-allowed"), 5_000, out);
        generator.onPeriodicEmit(out); // data says 4_899: below the tick's, not emitted
        generator.onEvent(Either.Right(4_000L), 4_000, out); // an older tick moves nothing
        generator.onEvent(Either.Left("b"), 7_000, out);
        generator.onPeriodicEmit(out);
        assertEquals(List.of(4_999L, 6_899L), out.watermarks);
    }

    @Test
    void withoutTicksTheApplicationsGeneratorDecides() {
        WatermarkGenerator<Either<String, Long>> generator =
                generator(ProgressControlWatermarks.forMonotonousTimestamps());
        Output out = new Output();
        generator.onEvent(Either.Left("a"), 10, out);
        generator.onEvent(Either.Left("b"), 20, out);
        generator.onPeriodicEmit(out);
        assertEquals(List.of(19L), out.watermarks);
    }

    @Test
    void idlenessOfTheApplicationsStrategyPassesThrough() {
        WatermarkStrategy<String> idle = WatermarkStrategy.forGenerator(ctx -> new WatermarkGenerator<>() {
            @Override
            public void onEvent(String event, long eventTimestamp, WatermarkOutput output) {}

            @Override
            public void onPeriodicEmit(WatermarkOutput output) {
                output.markIdle();
            }
        });
        WatermarkGenerator<Either<String, Long>> generator =
                generator(ProgressControlWatermarks.wrap(idle));
        Output out = new Output();
        generator.onPeriodicEmit(out);
        assertEquals(1, out.idle);
    }

    @Test
    void ticksAreTimedByTheirOwnTimestampAndDataByTheApplicationsAssigner() {
        WatermarkStrategy<Either<String, Long>> strategy = ProgressControlWatermarks.wrap(
                WatermarkStrategy.<String>forMonotonousTimestamps()
                        .withTimestampAssigner((value, recordTimestamp) -> Long.parseLong(value)));
        TimestampAssigner<Either<String, Long>> assigner = strategy.createTimestampAssigner(null);
        assertEquals(42L, assigner.extractTimestamp(Either.Left("42"), 7));
        assertEquals(900L, assigner.extractTimestamp(Either.Right(900L), 7));
    }
}
