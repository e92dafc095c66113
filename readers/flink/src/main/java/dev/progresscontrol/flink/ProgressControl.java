package dev.progresscontrol.flink;

import dev.progresscontrol.core.ControlMarker;
import dev.progresscontrol.core.ControlRecordValidator;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.java.typeutils.EitherTypeInfo;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The one call that puts a progress-controlled Kafka source into a job: {@link #fromSource} is
 * {@code env.fromSource} followed by an operator that drops the ticks, so the stream the
 * application gets holds its own records only, with watermarks moved by data and ticks alike.
 * The drop operator has the source's parallelism and is chained to it (no serialization, no
 * network hop); the ticks have done their work by then, in the source's per-partition watermark
 * generators ({@link ProgressControlWatermarks}).
 *
 * <p>Also here, for any code holding a Kafka record: {@link #hasControlHeader} (is it a tick, valid
 * or not) and {@link #headerValues}, what {@code progress-control-core}'s validator takes.
 */
public final class ProgressControl {
    /** The header that makes a record a control record. */
    public static final String HEADER = ControlMarker.HEADER;

    private ProgressControl() {}

    /** Whether {@code headers} carry a {@value #HEADER} header at all, valid or not. */
    public static boolean hasControlHeader(Headers headers) {
        return headers != null && headers.lastHeader(HEADER) != null;
    }

    /**
     * The values of the {@value #HEADER} headers in {@code headers}, in record order: what
     * {@link ControlRecordValidator#check} takes.
     */
    public static List<byte[]> headerValues(Headers headers) {
        List<byte[]> values = new ArrayList<>(1);
        if (headers != null) {
            for (Header header : headers.headers(HEADER)) {
                values.add(header.value());
            }
        }
        return values;
    }

    /**
     * {@code env.fromSource(source, watermarks, sourceName)} without the ticks.
     *
     * @param source a Kafka source built with {@link ProgressControlDeserializationSchema}
     * @param watermarks a strategy from {@link ProgressControlWatermarks}
     */
    public static <T> SingleOutputStreamOperator<T> fromSource(
            StreamExecutionEnvironment env,
            Source<Either<T, Long>, ?, ?> source,
            WatermarkStrategy<Either<T, Long>> watermarks,
            String sourceName) {
        return withoutTicks(env.fromSource(source, watermarks, sourceName));
    }

    /** The records of a stream of {@link ProgressControlDeserializationSchema}'s output. */
    public static <T> SingleOutputStreamOperator<T> withoutTicks(DataStream<Either<T, Long>> stream) {
        if (!(stream.getType() instanceof EitherTypeInfo<?, ?> either)) {
            throw new IllegalArgumentException(
                    "expected a stream of ProgressControlDeserializationSchema's output, got "
                            + stream.getType());
        }
        @SuppressWarnings("unchecked")
        TypeInformation<T> valueType = (TypeInformation<T>) either.getLeftType();
        return stream.flatMap(new DropTicks<T>(), valueType)
                .name("drop progress-control ticks")
                .setParallelism(stream.getParallelism());
    }

    /** Hands on data, drops ticks. */
    private static final class DropTicks<T> implements FlatMapFunction<Either<T, Long>, T> {
        private static final long serialVersionUID = 1L;

        @Override
        public void flatMap(Either<T, Long> element, Collector<T> out) {
            if (element.isLeft()) {
                out.collect(element.left());
            }
        }
    }
}
