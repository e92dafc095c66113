package dev.progresscontrol.kafka.streams.example;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * Runs {@link TickedWindows} as real Kafka Streams applications, one per properties file given
 * as an argument ({@code application.id}, {@code bootstrap.servers}, {@code input},
 * {@code sessions.output}, {@code sliding.output}, {@code gap.ms}, {@code difference.ms}, {@code grace.ms}, and any
 * other Kafka Streams or {@code progress.control.*} settings), or, given {@code topology}, one of
 * {@link RegistryTopologies} (with its own properties). Prints {@code started <id>} once
 * an application runs, {@code failed <id> <message>} if one stops on an error, and closes them
 * all when stdin closes (the test harness's way to stop it). With {@code metrics.file}, an
 * application writes there, once closed, its tasks' {@code dropped-records-total} (Kafka Streams'
 * count of records it skipped, e.g. for a null key) as {@code dropped-records-total=<n>}.
 */
public final class TickedWindowsApp {

    private TickedWindowsApp() {
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        List<KafkaStreams> apps = new ArrayList<>();
        Map<KafkaStreams, String> metricsFiles = new HashMap<>();
        for (String file : args) {
            Properties props = new Properties();
            try (Reader reader = Files.newBufferedReader(Path.of(file), StandardCharsets.UTF_8)) {
                props.load(reader);
            }
            String metricsFile = (String) props.remove("metrics.file");
            KafkaStreams app = start(props);
            apps.add(app);
            if (metricsFile != null) {
                metricsFiles.put(app, metricsFile);
            }
        }
        try (BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            while (stdin.readLine() != null) {
                // the harness closes stdin to stop us
            }
        }
        for (KafkaStreams app : apps) {
            double dropped = droppedRecords(app);
            app.close(Duration.ofSeconds(30));
            if (metricsFiles.containsKey(app)) {
                Files.writeString(Path.of(metricsFiles.get(app)), "dropped-records-total=" + (long) dropped + "\n");
            }
        }
    }

    /** The sum of the application's task-level {@code dropped-records-total}. */
    private static double droppedRecords(KafkaStreams app) {
        return app.metrics().values().stream()
                .filter(m -> m.metricName().name().equals("dropped-records-total")
                        && m.metricName().group().equals("stream-task-metrics"))
                .mapToDouble(m -> ((Number) m.metricValue()).doubleValue())
                .sum();
    }

    private static KafkaStreams start(Properties props) {
        String id = props.getProperty(StreamsConfig.APPLICATION_ID_CONFIG);
        StreamsBuilder builder = new StreamsBuilder();
        String topology = (String) props.remove("topology");
        if (topology != null) {
            RegistryTopologies.build(topology, builder, props);
        } else {
            TickedWindows.build(builder,
                    (String) props.remove("input"),
                    (String) props.remove("sessions.output"),
                    (String) props.remove("sliding.output"),
                    Duration.ofMillis(Long.parseLong((String) props.remove("gap.ms"))),
                    Duration.ofMillis(Long.parseLong((String) props.remove("difference.ms"))),
                    Duration.ofMillis(Long.parseLong((String) props.remove("grace.ms"))),
                    new CallCounts());
        }
        KafkaStreams streams = new KafkaStreams(builder.build(props), props);
        streams.setUncaughtExceptionHandler(error -> {
            say("failed " + id + " " + String.valueOf(error).replace('\n', ' '));
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                say("started " + id);
            }
        });
        streams.start();
        return streams;
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
