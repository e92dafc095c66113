package kpc.bench;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.FileReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;

/**
 * The Kafka Streams engine of the engines benchmark (bench/engines.py): one windowed count,
 * final results only, run until SIGTERM (then closed cleanly).
 *
 * <pre>
 *   java -cp JARS/* kpc.bench.ThroughputApp SPEC_FILE
 * </pre>
 *
 * The spec is a Java properties file: {@code application.id}, {@code bootstrap.servers},
 * {@code state.dir}, {@code workload} ({@code session}, {@code tumbling} or {@code orders}),
 * {@code in}, {@code out}, {@code window.ms} (session gap or tumbling window size), for
 * {@code orders} the {@code users} table's topic; and {@code config.*} passed to StreamsConfig as
 * they are. Everything else is Kafka Streams' default.
 *
 * <p>The same work as the runtime's and Quix Streams' twins of this topology: every input value is
 * parsed with Jackson into a tree (as their JSON deserializers parse it into a dict, which the
 * count then ignores), and every output value is written by Jackson: key the input key, value
 * JSON {@code {"start":..,"end":..,"count":..}}.
 */
public final class ThroughputApp {
  private static final Serde<String> STRING = Serdes.String();
  private static final Serde<Long> LONG = Serdes.Long();
  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final Serde<JsonNode> JSON =
      Serdes.serdeFrom(
          (topic, node) -> {
            try {
              return node == null ? null : MAPPER.writeValueAsBytes(node);
            } catch (JsonProcessingException e) {
              throw new SerializationException(e);
            }
          },
          (topic, bytes) -> {
            try {
              return bytes == null ? null : MAPPER.readTree(bytes);
            } catch (IOException e) {
              throw new SerializationException(e);
            }
          });

  private ThroughputApp() {}

  public static void main(final String[] args) throws Exception {
    final Properties spec = new Properties();
    try (FileReader reader = new FileReader(args[0], StandardCharsets.UTF_8)) {
      spec.load(reader);
    }
    final Properties config = new Properties();
    config.put(StreamsConfig.APPLICATION_ID_CONFIG, spec.getProperty("application.id"));
    config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, spec.getProperty("bootstrap.servers"));
    config.put(StreamsConfig.STATE_DIR_CONFIG, spec.getProperty("state.dir"));
    for (final String key : spec.stringPropertyNames()) {
      if (key.startsWith("config.")) {
        config.put(key.substring("config.".length()), spec.getProperty(key));
      }
    }
    final StreamsBuilder builder = new StreamsBuilder();
    build(builder, spec);
    final KafkaStreams streams = new KafkaStreams(builder.build(config), config);
    final CountDownLatch done = new CountDownLatch(1);
    final AtomicBoolean failed = new AtomicBoolean();
    streams.setUncaughtExceptionHandler(
        e -> {
          System.err.println("ThroughputApp failed: " + e);
          e.printStackTrace();
          failed.set(true);
          done.countDown();
          return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(30));
                  done.countDown();
                }));
    streams.start();
    done.await();
    if (failed.get()) {
      streams.close(Duration.ofSeconds(30));
      Runtime.getRuntime().halt(1);
    }
  }

  private static void build(final StreamsBuilder builder, final Properties spec) {
    final Duration window = Duration.ofMillis(Long.parseLong(spec.getProperty("window.ms")));
    if ("orders".equals(spec.getProperty("workload"))) {
      orders(builder, spec, window);
      return;
    }
    final KGroupedStream<String, JsonNode> grouped =
        builder.stream(spec.getProperty("in"), Consumed.with(STRING, JSON)).groupByKey();
    final String workload = spec.getProperty("workload");
    final KTable<Windowed<String>, Long> counts =
        switch (workload) {
          case "session" ->
              grouped
                  .windowedBy(SessionWindows.ofInactivityGapWithNoGrace(window))
                  .count(Materialized.with(STRING, LONG));
          case "tumbling" ->
              grouped
                  .windowedBy(TimeWindows.ofSizeWithNoGrace(window))
                  .count(Materialized.with(STRING, LONG));
          default -> throw new IllegalArgumentException("unknown workload " + workload);
        };
    counts
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map(
            (w, n) ->
                KeyValue.pair(
                    w.key(),
                    (JsonNode)
                        MAPPER
                            .createObjectNode()
                            .put("start", w.window().start())
                            .put("end", w.window().end())
                            .put("count", n)))
        .to(spec.getProperty("out"), Produced.with(STRING, JSON));
  }

  /**
   * The realistic topology of bench/_orders.py, as the runtime's twin writes it: paid orders
   * re-keyed by user (the join repartitions), joined with the users table, summed per user
   * session with an initializer, adder and merger, final results only.
   */
  private static void orders(final StreamsBuilder builder, final Properties spec, final Duration gap) {
    final KTable<String, JsonNode> users =
        builder.table(spec.getProperty("users"), Consumed.with(STRING, JSON));
    builder.stream(spec.getProperty("in"), Consumed.with(STRING, JSON))
        .filter((id, order) -> !"cancelled".equals(order.get("status").asText()))
        .selectKey((id, order) -> order.get("user").asText())
        .join(
            users,
            (order, user) ->
                (JsonNode)
                    MAPPER
                        .createObjectNode()
                        .put("amount", order.get("amount").asLong())
                        .put("region", user.get("region").asText()),
            Joined.with(STRING, JSON, JSON))
        .mapValues(
            sale ->
                (JsonNode)
                    ((ObjectNode) sale.deepCopy()).put("net", sale.get("amount").asLong() * 0.8))
        .groupByKey(Grouped.with(STRING, JSON))
        .windowedBy(
            SessionWindows.ofInactivityGapAndGrace(
                gap, Duration.ofMillis(Long.parseLong(spec.getProperty("grace.ms")))))
        .aggregate(
            () -> (JsonNode) MAPPER.createObjectNode().put("count", 0L).put("total", 0L),
            (user, sale, agg) ->
                sums(agg.get("count").asLong() + 1, agg.get("total").asLong() + sale.get("amount").asLong()),
            (user, a, b) ->
                sums(
                    a.get("count").asLong() + b.get("count").asLong(),
                    a.get("total").asLong() + b.get("total").asLong()),
            Materialized.with(STRING, JSON))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map(
            (w, agg) ->
                KeyValue.pair(
                    w.key(),
                    (JsonNode)
                        MAPPER
                            .createObjectNode()
                            .put("start", w.window().start())
                            .put("end", w.window().end())
                            .put("count", agg.get("count").asLong())
                            .put("total", agg.get("total").asLong())))
        .to(spec.getProperty("out"), Produced.with(STRING, JSON));
  }

  private static JsonNode sums(final long count, final long total) {
    return MAPPER.createObjectNode().put("count", count).put("total", total);
  }
}
