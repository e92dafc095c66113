package dev.progresscontrol.flink.example;

import dev.progresscontrol.flink.ProgressControl;
import dev.progresscontrol.flink.ProgressControlDeserializationSchema;
import dev.progresscontrol.flink.ProgressControlWatermarks;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The example job of docs/readers/flink.md, run by tests/readers/test_flink.py on a MiniCluster
 * (one local JVM): per {@code mode=topic} argument, clicks (key: user, Kafka timestamp: event
 * time) from the real Kafka source, per-user event-time session windows, one line per closed
 * session on stdout: {@code session <mode> <user>=<first click>,<last click>,<clicks>}.
 *
 * <p>Every user function fails the job on anything but a click, so a tick reaching one shows as
 * {@code failed ...}. The job runs until stdin closes, then is cancelled.
 *
 * <p>Arguments: {@code <bootstrap servers> <gap ms> <parallelism> <mode>=<topic>...}
 */
public final class TickedSessionsJob {
    private TickedSessionsJob() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Duration gap = Duration.ofMillis(Long.parseLong(args[1]));
        int parallelism = Integer.parseInt(args[2]);
        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        for (int i = 3; i < args.length; i++) {
            String[] modeTopic = args[i].split("=", 2);
            sessions(env, bootstrap, modeTopic[0], modeTopic[1], gap);
        }
        JobClient job = env.executeAsync("ticked sessions");
        job.getJobExecutionResult().whenComplete((result, error) -> {
            if (error != null) {
                say("failed " + rootCause(error));
            }
        });
        say("started " + job.getJobID());
        while (System.in.read() != -1) {
            // Runs until the test closes stdin.
        }
        job.cancel().get(60, TimeUnit.SECONDS);
        System.exit(0);
    }

    private static void sessions(
            StreamExecutionEnvironment env, String bootstrap, String mode, String topic, Duration gap) {
        // The three lines a user adds: the wrapped deserializer, the tick-aware watermark
        // strategy, and ProgressControl.fromSource in place of env.fromSource.
        KafkaSource<Either<Tuple2<String, Long>, Long>> source =
                KafkaSource.<Either<Tuple2<String, Long>, Long>>builder()
                        .setBootstrapServers(bootstrap)
                        .setTopics(topic)
                        .setGroupId("ticked-sessions-" + mode)
                        .setClientIdPrefix("ticked-sessions-" + mode)
                        .setStartingOffsets(OffsetsInitializer.earliest())
                        .setDeserializer(ProgressControlDeserializationSchema.wrap(new Clicks()))
                        .build();
        DataStream<Tuple2<String, Long>> clicks = ProgressControl.fromSource(
                env,
                source,
                ProgressControlWatermarks.forBoundedOutOfOrderness(Duration.ZERO),
                mode + " clicks");
        clicks.map(TickedSessionsJob::onlyClicks)
                .returns(Clicks.TYPE)
                .keyBy(click -> click.f0)
                .window(EventTimeSessionWindows.withGap(gap))
                .process(new SessionSummary(mode))
                .sinkTo(new DiscardingSink<>());
    }

    private static Tuple2<String, Long> onlyClicks(Tuple2<String, Long> click) {
        if (click == null || click.f0 == null || click.f0.isEmpty() || click.f1 == null) {
            throw new IllegalStateException("a user function saw something not a click: " + click);
        }
        return click;
    }

    /** The application's own schema: (user, timestamp); it fails on a tick. */
    static final class Clicks implements KafkaRecordDeserializationSchema<Tuple2<String, Long>> {
        private static final long serialVersionUID = 1L;
        static final TypeInformation<Tuple2<String, Long>> TYPE = Types.TUPLE(Types.STRING, Types.LONG);

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Tuple2<String, Long>> out) {
            if (ProgressControl.hasControlHeader(record.headers()) || record.key() == null || record.value() == null) {
                throw new IllegalStateException("the user's deserializer saw a tick: " + record);
            }
            out.collect(Tuple2.of(new String(record.key(), StandardCharsets.UTF_8), record.timestamp()));
        }

        @Override
        public TypeInformation<Tuple2<String, Long>> getProducedType() {
            return TYPE;
        }
    }

    /** One line per closed session: first and last click (inclusive) and the count. */
    static final class SessionSummary
            extends ProcessWindowFunction<Tuple2<String, Long>, String, String, TimeWindow> {
        private static final long serialVersionUID = 1L;
        private final String mode;

        SessionSummary(String mode) {
            this.mode = mode;
        }

        @Override
        public void process(
                String user, Context context, Iterable<Tuple2<String, Long>> clicks, Collector<String> out) {
            long first = Long.MAX_VALUE;
            long last = Long.MIN_VALUE;
            int count = 0;
            for (Tuple2<String, Long> click : clicks) {
                onlyClicks(click);
                first = Math.min(first, click.f1);
                last = Math.max(last, click.f1);
                count++;
            }
            String line = user + "=" + first + "," + last + "," + count;
            say("session " + mode + " " + line);
            out.collect(line);
        }
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String rootCause(Throwable error) {
        Throwable cause = error;
        while (cause.getCause() != null) {
            cause = cause.getCause();
        }
        return (cause.getClass().getName() + ": " + cause.getMessage()).replace('\n', ' ');
    }
}
