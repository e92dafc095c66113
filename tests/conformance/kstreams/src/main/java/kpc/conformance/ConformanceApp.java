package kpc.conformance;

import java.io.BufferedReader;
import java.io.FileReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs named topologies in Kafka Streams for the conformance suite (tests/conformance).
 *
 * <p>Commands arrive on stdin, one per line; answers go to stdout:
 * <pre>
 *   start SPEC_FILE   ->  started APP_ID   (once RUNNING)  or  failed APP_ID MESSAGE
 *   stop APP_ID       ->  stopped APP_ID
 *   drive SPEC_FILE INPUT_FILE OUTPUT_FILE  ->  driven APP_ID  or  failed APP_ID MESSAGE
 * </pre>
 * End of stdin closes every app and exits. A spec file is a Java properties file:
 * {@code application.id}, {@code bootstrap.servers}, {@code state.dir}, {@code topologies}
 * (comma list of instance names), per instance {@code NAME.type}, {@code NAME.in},
 * {@code NAME.in2}, {@code NAME.out}, {@code NAME.out2}, {@code NAME.out3}, {@code NAME.out4},
 * {@code NAME.gap.ms},
 * {@code NAME.grace.ms}; and {@code config.*} passed to StreamsConfig as they are.
 *
 * <p>{@code drive} runs each topology of the spec in Kafka Streams' {@code TopologyTestDriver}
 * instead, one driver per topology and input partition (see {@link #drive}); there
 * {@code NAME.config.*} override {@code config.*} for one topology.
 *
 * <p>Every topology here has its twin in tests/conformance/topologies.py; keep them identical.
 * The one exception, {@code results-tumbling-sum}, is not a conformance case but a downstream
 * reader of the runtime's output (see {@link #resultsTumblingSum}).
 * Keys and values are strings unless a topology says otherwise.
 */
public final class ConformanceApp {
  private static final Serde<String> STRING = Serdes.String();
  private static final Serde<Long> LONG = Serdes.Long();
  private static final Serde<Windowed<String>> SESSION_KEY =
      new WindowedSerdes.SessionWindowedSerde<>(Serdes.String());

  private static final String SENTINEL = "__progress_control__";
  /** The count of a session result's JSON value (results-tumbling-sum). */
  private static final Pattern COUNT = Pattern.compile("\"count\"\\s*:\\s*(\\d+)");

  private static final Map<String, KafkaStreams> APPS = new ConcurrentHashMap<>();

  private ConformanceApp() {}

  public static void main(final String[] args) throws IOException {
    final BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      final String[] parts = line.trim().split(" ", 2);
      if (parts.length != 2) {
        continue;
      }
      try {
        if (parts[0].equals("start")) {
          start(parts[1]);
        } else if (parts[0].equals("stop")) {
          stop(parts[1]);
        } else if (parts[0].equals("drive")) {
          drive(parts[1]);
        }
      } catch (final Exception e) {
        answer("failed " + parts[1] + " " + oneLine(e));
      }
    }
    for (final String id : APPS.keySet()) {
      stop(id);
    }
    System.exit(0);
  }

  private static synchronized void answer(final String line) {
    System.out.println(line);
    System.out.flush();
  }

  private static String oneLine(final Throwable e) {
    return (e.getClass().getName() + ": " + e.getMessage()).replace('\n', ' ');
  }

  private static void start(final String specFile) throws Exception {
    final Properties spec = new Properties();
    try (FileReader reader = new FileReader(specFile, StandardCharsets.UTF_8)) {
      spec.load(reader);
    }
    final String id = spec.getProperty("application.id");
    final StreamsBuilder builder = new StreamsBuilder();
    for (final String name : spec.getProperty("topologies").split(",")) {
      build(builder, new Instance(spec, name.trim()));
    }
    final Properties config = new Properties();
    config.put(StreamsConfig.APPLICATION_ID_CONFIG, id);
    config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, spec.getProperty("bootstrap.servers"));
    config.put(StreamsConfig.STATE_DIR_CONFIG, spec.getProperty("state.dir"));
    // Stream-stream joins look for unjoined results to emit at most once a second of wall-clock
    // time by default (an internal setting): look at every record, so results are deterministic.
    config.put("__emit.interval.ms.kstreams.outer.join.spurious.results.fix__", "0");
    for (final String key : spec.stringPropertyNames()) {
      if (key.startsWith("config.")) {
        config.put(key.substring("config.".length()), spec.getProperty(key));
      }
    }
    final KafkaStreams streams = new KafkaStreams(builder.build(config), config);
    final CountDownLatch running = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING) {
            running.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        e -> {
          answer("failed " + id + " " + oneLine(e));
          return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    APPS.put(id, streams);
    streams.start();
    if (!running.await(120, TimeUnit.SECONDS)) {
      throw new IllegalStateException("not RUNNING after 120 s: " + streams.state());
    }
    answer("started " + id);
  }

  private static void stop(final String id) {
    final KafkaStreams streams = APPS.remove(id);
    if (streams != null) {
      streams.close(Duration.ofSeconds(30));
    }
    answer("stopped " + id);
  }

  private static byte[] bytes(final String field) {
    return field.equals("-") ? null : Base64.getDecoder().decode(field);
  }

  private static String field(final byte[] bytes) {
    return bytes == null ? "-" : Base64.getEncoder().encodeToString(bytes);
  }

  /**
   * Runs every topology of the spec in a {@code TopologyTestDriver} of its own per input
   * partition (every topic of a driver has one partition), on the input records of that
   * topology and partition in file order, and writes what each output topic received.
   *
   * <p>Input lines: {@code NAME PARTITION ROLE KEY VALUE TIMESTAMP HEADERS}, tab-separated;
   * output lines: {@code NAME PARTITION ROLE KEY VALUE TIMESTAMP HEADERS}. Keys, values and
   * header values are Base64 ({@code -} for null); headers are {@code name=value} joined by
   * commas ({@code -} for none).
   */
  private static void drive(final String arguments) throws Exception {
    final String[] files = arguments.split(" ");
    final Properties spec = new Properties();
    try (FileReader reader = new FileReader(files[0], StandardCharsets.UTF_8)) {
      spec.load(reader);
    }
    final String id = spec.getProperty("application.id");
    try {
      driveAll(spec, files[1], files[2]);
    } catch (final Exception e) {
      answer("failed " + id + " " + oneLine(e));
      return;
    }
    answer("driven " + id);
  }

  private static void driveAll(final Properties spec, final String inputFile, final String outputFile)
      throws IOException {
    final String id = spec.getProperty("application.id");
    final Map<String, List<String[]>> inputs = new LinkedHashMap<>();
    for (final String line : Files.readAllLines(Path.of(inputFile), StandardCharsets.UTF_8)) {
      final String[] fields = line.split("\t", -1);
      inputs.computeIfAbsent(fields[0] + "\t" + fields[1], k -> new ArrayList<>()).add(fields);
    }
    try (PrintWriter out = new PrintWriter(outputFile, StandardCharsets.UTF_8)) {
      for (final Map.Entry<String, List<String[]>> group : inputs.entrySet()) {
        final String[] first = group.getValue().get(0);
        final Instance t = new Instance(spec, first[0]);
        final StreamsBuilder builder = new StreamsBuilder();
        build(builder, t);
        final Properties config = new Properties();
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, id + "-" + first[0]);
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "topology-test-driver:9092");
        config.put(StreamsConfig.STATE_DIR_CONFIG, spec.getProperty("state.dir"));
        config.put("__emit.interval.ms.kstreams.outer.join.spurious.results.fix__", "0");
        final String own = first[0] + ".config.";
        for (final String key : spec.stringPropertyNames()) {
          if (key.startsWith("config.")) {
            config.putIfAbsent(key.substring("config.".length()), spec.getProperty(key));
          } else if (key.startsWith(own)) {
            config.put(key.substring(own.length()), spec.getProperty(key));
          }
        }
        try (TopologyTestDriver driver =
            new TopologyTestDriver(builder.build(config), config, Instant.ofEpochMilli(0))) {
          final Map<String, TestInputTopic<byte[], byte[]>> in = new LinkedHashMap<>();
          for (final String[] f : group.getValue()) {
            if (f[2].equals("wall-clock")) { // no record: the wall clock moves by its timestamp
              driver.advanceWallClockTime(Duration.ofMillis(Long.parseLong(f[5])));
              continue;
            }
            final String topic = spec.getProperty(f[0] + "." + f[2]);
            final RecordHeaders headers = new RecordHeaders();
            if (!f[6].equals("-")) {
              for (final String header : f[6].split(",")) {
                final String[] pair = header.split("=", 2);
                headers.add(pair[0], bytes(pair[1]));
              }
            }
            in.computeIfAbsent(
                    topic,
                    name ->
                        driver.createInputTopic(
                            name, new ByteArraySerializer(), new ByteArraySerializer()))
                .pipeInput(
                    new TestRecord<>(bytes(f[3]), bytes(f[4]), headers, Long.parseLong(f[5])));
          }
          for (final String role : new String[] {"out", "out2", "out3", "out4"}) {
            final String topic = spec.getProperty(first[0] + "." + role);
            if (topic == null) {
              continue;
            }
            final TestOutputTopic<byte[], byte[]> reader =
                driver.createOutputTopic(
                    topic, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            for (final TestRecord<byte[], byte[]> record : reader.readRecordsToList()) {
              final List<String> headers = new ArrayList<>();
              for (final Header header : record.headers()) {
                headers.add(header.key() + "=" + field(header.value()));
              }
              out.println(
                  String.join(
                      "\t",
                      first[0],
                      first[1],
                      role,
                      field(record.key()),
                      field(record.value()),
                      Long.toString(record.timestamp()),
                      headers.isEmpty() ? "-" : String.join(",", headers)));
            }
          }
        }
      }
    }
  }

  private static void punctuatedCount(
      final StreamsBuilder builder,
      final Instance t,
      final long intervalMs,
      final PunctuationType type) {
    final String store = t.out + "-counts";
    builder.addStateStore(
        Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(store), STRING, LONG));
    stream(builder, t.in)
        .process(() -> new PunctuatedCount(store, intervalMs, type), store)
        .to(t.out, Produced.with(STRING, STRING));
  }

  /**
   * The table key a {@code stream-global-join} record joins: its value up to {@code :} (none if
   * that is empty).
   */
  private static String globalKey(final String key, final String value) {
    if (value == null) {
      return null;
    }
    final String target = value.substring(0, Math.max(0, value.indexOf(':')));
    return target.isEmpty() ? null : target;
  }

  /**
   * The Processor API cases: count records per key in a store and forward {@code c=COUNT} per
   * record. Every interval of stream time a punctuator forwards {@code p=COUNT@TIME} for every
   * key, stamped with the punctuation's time; of wall-clock time, {@code w=COUNT@ELAPSED} (the
   * wall clock since {@code init}), stamped with the stream time.
   */
  private static final class PunctuatedCount implements Processor<String, String, String, String> {
    private final String storeName;
    private final long intervalMs;
    private final PunctuationType type;
    private ProcessorContext<String, String> context;
    private KeyValueStore<String, Long> counts;
    private long started;

    PunctuatedCount(final String storeName, final long intervalMs, final PunctuationType type) {
      this.storeName = storeName;
      this.intervalMs = intervalMs;
      this.type = type;
    }

    @Override
    public void init(final ProcessorContext<String, String> context) {
      this.context = context;
      counts = context.getStateStore(storeName);
      started = context.currentSystemTimeMs();
      context.schedule(Duration.ofMillis(intervalMs), type, this::punctuate);
    }

    @Override
    public void process(final Record<String, String> record) {
      if (record.key() == null) {
        return;
      }
      final Long old = counts.get(record.key());
      final long count = old == null ? 1 : old + 1;
      counts.put(record.key(), count);
      context.forward(record.withValue("c=" + count));
    }

    private void punctuate(final long timestamp) {
      final boolean streamTime = type == PunctuationType.STREAM_TIME;
      final String at = streamTime ? "@" + timestamp : "@" + (timestamp - started);
      final long stamp = streamTime ? timestamp : context.currentStreamTimeMs();
      try (KeyValueIterator<String, Long> all = counts.all()) {
        while (all.hasNext()) {
          final KeyValue<String, Long> entry = all.next();
          final String label = (streamTime ? "p=" : "w=") + entry.value + at;
          context.forward(new Record<>(entry.key, label, stamp));
        }
      }
    }
  }

  /** One topology instance's part of a spec. */
  private static final class Instance {
    final String type;
    final String in;
    final String in2;
    final String out;
    final String out2;
    final String out3;
    final String out4;
    final SessionWindows windows;
    final long gapMs;
    final long graceMs;

    Instance(final Properties spec, final String name) {
      type = spec.getProperty(name + ".type");
      in = spec.getProperty(name + ".in");
      in2 = spec.getProperty(name + ".in2");
      out = spec.getProperty(name + ".out");
      out2 = spec.getProperty(name + ".out2");
      out3 = spec.getProperty(name + ".out3");
      out4 = spec.getProperty(name + ".out4");
      gapMs = Long.parseLong(spec.getProperty(name + ".gap.ms", "1"));
      graceMs = Long.parseLong(spec.getProperty(name + ".grace.ms", "0"));
      windows =
          SessionWindows.ofInactivityGapAndGrace(
              Duration.ofMillis(Long.parseLong(spec.getProperty(name + ".gap.ms", "1"))),
              Duration.ofMillis(Long.parseLong(spec.getProperty(name + ".grace.ms", "0"))));
    }
  }

  private static KStream<String, String> stream(final StreamsBuilder builder, final String topic) {
    return builder.stream(topic, Consumed.with(STRING, STRING));
  }

  private static KTable<String, String> table(
      final StreamsBuilder builder, final String topic, final String store) {
    return builder.table(
        topic,
        Consumed.with(STRING, STRING),
        Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(store)
            .withKeySerde(STRING)
            .withValueSerde(STRING));
  }

  private static long number(final String value) {
    return Long.parseLong(value);
  }

  private static void build(final StreamsBuilder builder, final Instance t) {
    switch (t.type) {
      case "session-count", "session-count-suppressed" -> {
        KTable<Windowed<String>, Long> counts =
            sessions(stream(builder, t.in), t).count(Materialized.with(STRING, LONG));
        if (t.type.endsWith("-suppressed")) {
          counts = counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
        }
        counts.toStream().to(t.out, Produced.with(SESSION_KEY, LONG));
      }
      case "session-aggregate", "session-aggregate-suppressed" -> {
        KTable<Windowed<String>, String> joined =
            sessions(stream(builder, t.in), t)
                .aggregate(
                    () -> "",
                    (key, value, aggregate) -> aggregate + "[" + value + "]",
                    (key, left, right) -> left + right,
                    Materialized.with(STRING, STRING));
        if (t.type.endsWith("-suppressed")) {
          joined = joined.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
        }
        joined.toStream().to(t.out, Produced.with(SESSION_KEY, STRING));
      }
      case "merge-session-count" -> {
        final KStream<String, String> merged = stream(builder, t.in).merge(stream(builder, t.in2));
        sessions(merged, t)
            .count(Materialized.with(STRING, LONG))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
            .toStream()
            .to(t.out, Produced.with(SESSION_KEY, LONG));
      }
      case "table-count" ->
          stream(builder, t.in)
              .groupByKey()
              .count(Materialized.with(STRING, LONG))
              .toStream()
              .to(t.out, Produced.with(STRING, LONG));
      case "table-reduce" ->
          stream(builder, t.in)
              .groupByKey()
              .reduce(
                  (aggregate, value) -> Long.toString(Math.max(number(aggregate), number(value))),
                  Materialized.with(STRING, STRING))
              .toStream()
              .to(t.out, Produced.with(STRING, STRING));
      case "table-aggregate" ->
          stream(builder, t.in)
              .groupByKey()
              .aggregate(
                  () -> 0L,
                  (key, value, aggregate) -> (aggregate + number(value)) % 4,
                  Materialized.with(STRING, LONG))
              .toStream()
              .to(t.out, Produced.with(STRING, LONG));
      case "table-source" -> {
        final KTable<String, String> table = table(builder, t.in, t.out + "-store");
        table.toStream().to(t.out, Produced.with(STRING, STRING));
        table
            .filter((key, value) -> number(value) % 3 != 0)
            .mapValues(value -> value + "!")
            .toStream()
            .to(t.out2, Produced.with(STRING, STRING));
      }
      case "table-filter" -> tableFilter(builder, t);
      case "stream-table-join" -> {
        final KTable<String, String> table = table(builder, t.in2, t.out + "-store");
        final KStream<String, String> stream = stream(builder, t.in);
        stream
            .join(table, (value, row) -> value + "|" + row)
            .to(t.out, Produced.with(STRING, STRING));
        stream
            .leftJoin(table, (value, row) -> value + "|" + row)
            .to(t.out2, Produced.with(STRING, STRING));
        stream
            .join(table.filter((key, row) -> number(row) % 3 != 0), (value, row) -> value + "|" + row)
            .to(t.out3, Produced.with(STRING, STRING));
      }
      case "stream-stream-join", "stream-stream-join-reversed", "stream-stream-join-symmetric" ->
          streamStreamJoins(builder, t);
      case "repartition-count" ->
          stream(builder, t.in)
              .selectKey((key, value) -> value == null ? key : value.split(":")[0])
              .groupByKey()
              .count(Materialized.with(STRING, LONG))
              .toStream()
              .to(t.out, Produced.with(STRING, LONG));
      case "punctuated-count" ->
          punctuatedCount(builder, t, t.gapMs, PunctuationType.STREAM_TIME);
      case "wall-clock-punctuated" ->
          punctuatedCount(builder, t, 1_000, PunctuationType.WALL_CLOCK_TIME);
      case "stream-global-join" -> {
        final GlobalKTable<String, String> table =
            builder.globalTable(
                t.in2,
                Consumed.with(STRING, STRING),
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(t.out + "-global")
                    .withKeySerde(STRING)
                    .withValueSerde(STRING));
        final KStream<String, String> stream = stream(builder, t.in);
        stream
            .join(table, ConformanceApp::globalKey, (value, row) -> value + "|" + row)
            .to(t.out, Produced.with(STRING, STRING));
        stream
            .leftJoin(table, ConformanceApp::globalKey, (value, row) -> value + "|" + row)
            .to(t.out2, Produced.with(STRING, STRING));
      }
      case "flat-map-split" -> flatMapSplit(builder, t);
      case "group-by-count" -> groupByCount(builder, t);
      case "to-table-suppress" -> toTableSuppress(builder, t);
      case "cogroup" -> cogroup(builder, t);
      case "cogroup-tumbling", "cogroup-session" -> cogroupWindowed(builder, t);
      case "table-table-join" -> tableTableJoins(builder, t);
      case "fk-join" -> foreignKeyJoins(builder, t);
      case "results-tumbling-sum" -> resultsTumblingSum(builder, t);
      default -> {
        if (!buildTimeWindowed(builder, t)) {
          throw new IllegalArgumentException("unknown topology type " + t.type);
        }
      }
    }
  }

  /**
   * Time and sliding windows, their parameters from the session ones: size (time difference) =
   * gap, hopping advance = gap / 2, same grace. Keys are time-windowed (key, then start).
   */
  private static boolean buildTimeWindowed(final StreamsBuilder builder, final Instance t) {
    final Duration size = Duration.ofMillis(t.gapMs);
    final Duration grace = Duration.ofMillis(t.graceMs);
    final Serde<Windowed<String>> timeKey =
        new WindowedSerdes.TimeWindowedSerde<>(Serdes.String(), t.gapMs);
    final boolean suppressed = t.type.endsWith("-suppressed");
    final String type = suppressed ? t.type.substring(0, t.type.length() - 11) : t.type;
    switch (type) {
      case "tumbling-count", "sliding-count" -> {
        final KStream<String, String> in = stream(builder, t.in);
        KTable<Windowed<String>, Long> counts =
            type.equals("tumbling-count")
                ? in.groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(size, grace))
                    .count(Materialized.with(STRING, LONG))
                // The sliding-window aggregation drops null values before they move its stream
                // time: give control records (null values under the sentinel key) a value, so
                // that they are time passing here too. The runtime never sees them as data, so
                // its twin needs no such step.
                : in.mapValues((key, value) -> value == null && SENTINEL.equals(key) ? "" : value)
                    .groupByKey()
                    .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(size, grace))
                    .count(Materialized.with(STRING, LONG));
        if (suppressed) {
          counts = counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
        }
        counts.toStream().to(t.out, Produced.with(timeKey, LONG));
      }
      case "hopping-aggregate" -> {
        final TimeWindowedKStream<String, String> windowed =
            stream(builder, t.in)
                .groupByKey()
                .windowedBy(
                    TimeWindows.ofSizeAndGrace(size, grace).advanceBy(Duration.ofMillis(t.gapMs / 2)));
        KTable<Windowed<String>, String> joined =
            windowed.aggregate(
                () -> "",
                (key, value, aggregate) -> aggregate + "[" + value + "]",
                Materialized.with(STRING, STRING));
        if (suppressed) {
          joined = joined.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
        }
        joined.toStream().to(t.out, Produced.with(timeKey, STRING));
      }
      default -> {
        return false;
      }
    }
    return true;
  }

  /**
   * A downstream reader of the runtime's final session results, not a conformance case (it has
   * no twin in topologies.py): tests/streams_runtime/cluster/test_promise_readers.py. Input: key
   * user, value JSON {@code {"start", "end", "count"}} stamped with the session's end. Per user,
   * tumbling windows of size gap.ms and grace grace.ms over those timestamps, final results only:
   * value {@code SESSIONS:EVENTS} (results counted, their counts summed), keys time-windowed.
   *
   * <p>Written as a user who never heard of ticks would write it, except for null safety: a
   * control record arrives here as an ordinary record (key {@code __progress_control__}, null
   * value) and must not fail the aggregator. It is aggregated under its own key like any record,
   * which is what moves this task's stream time (and, through the update reaching suppress, the
   * suppression buffer's time); its windows come out under the sentinel key, for the reader of
   * this output to drop.
   */
  private static void resultsTumblingSum(final StreamsBuilder builder, final Instance t) {
    final Serde<Windowed<String>> timeKey =
        new WindowedSerdes.TimeWindowedSerde<>(Serdes.String(), t.gapMs);
    stream(builder, t.in)
        .groupByKey()
        .windowedBy(
            TimeWindows.ofSizeAndGrace(Duration.ofMillis(t.gapMs), Duration.ofMillis(t.graceMs)))
        .aggregate(
            () -> "0:0",
            (key, value, aggregate) -> addResult(aggregate, value),
            Materialized.with(STRING, STRING))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .to(t.out, Produced.with(timeKey, STRING));
  }

  /** {@code SESSIONS:EVENTS} plus one session result; a null value (a tick) adds nothing. */
  private static String addResult(final String aggregate, final String value) {
    if (value == null) {
      return aggregate;
    }
    final Matcher count = COUNT.matcher(value);
    if (!count.find()) {
      throw new IllegalArgumentException("not a session result: " + value);
    }
    final String[] parts = aggregate.split(":");
    return (number(parts[0]) + 1) + ":" + (number(parts[1]) + number(count.group(1)));
  }

  /**
   * Filters over a source table without a store name (not queryable, so a filter on it sends
   * no old values unless something downstream asks): the table itself; a plain filter; a
   * materialised one; and a filter regrouped by value and counted, which asks for old values
   * (and so materialises the source table). Built in this order: a groupBy built first would
   * materialise the source before the other filters ask whether it sends old values.
   */
  /**
   * Inner, left (with a filtered right table, read through its filter) and outer joins on the
   * key; and the inner join regrouped by key and value and counted, which asks it for old values
   * (each group holds one key's rows: its updates come from one task, in order).
   */
  private static void tableTableJoins(final StreamsBuilder builder, final Instance t) {
    final KTable<String, String> left = table(builder, t.in, t.out + "-left");
    final KTable<String, String> right = table(builder, t.in2, t.out + "-right");
    final KTable<String, String> inner = left.join(right, (a, b) -> a + "|" + b);
    inner.toStream().to(t.out, Produced.with(STRING, STRING));
    left.leftJoin(right.filter((key, row) -> number(row) % 3 != 0), (a, b) -> a + "|" + b)
        .toStream()
        .to(t.out2, Produced.with(STRING, STRING));
    left.outerJoin(right, (a, b) -> a + "|" + b).toStream().to(t.out3, Produced.with(STRING, STRING));
    inner
        .groupBy((key, value) -> KeyValue.pair(key + ":" + value, key), Grouped.with(STRING, STRING))
        .count(Materialized.with(STRING, LONG))
        .toStream()
        .to(t.out4, Produced.with(STRING, LONG));
  }

  /** The foreign key of {@code c<n>:<m>}: the part before the colon, none for {@code -}. */
  private static String foreignKey(final String value) {
    final String key = value.split(":")[0];
    return key.equals("-") ? null : key;
  }

  /**
   * Inner and left joins on a foreign key (KIP-213), and the inner one on a table mapped (read
   * through its mapper when answers come back).
   */
  private static void foreignKeyJoins(final StreamsBuilder builder, final Instance t) {
    final KTable<String, String> orders = table(builder, t.in, t.out + "-orders");
    final KTable<String, String> customers = table(builder, t.in2, t.out + "-customers");
    orders
        .join(customers, ConformanceApp::foreignKey, (order, customer) -> order + "/" + customer)
        .toStream()
        .to(t.out, Produced.with(STRING, STRING));
    orders
        .leftJoin(customers, ConformanceApp::foreignKey, (order, customer) -> order + "/" + customer)
        .toStream()
        .to(t.out2, Produced.with(STRING, STRING));
    orders
        .mapValues(order -> order + "!")
        .join(customers, ConformanceApp::foreignKey, (order, customer) -> order + "/" + customer)
        .toStream()
        .to(t.out3, Produced.with(STRING, STRING));
  }

  private static void tableFilter(final StreamsBuilder builder, final Instance t) {
    final KTable<String, String> table = builder.table(t.in, Consumed.with(STRING, STRING));
    table.toStream().to(t.out, Produced.with(STRING, STRING));
    table.filter((key, value) -> !value.equals("x")).toStream().to(t.out2, Produced.with(STRING, STRING));
    table
        .filter(
            (key, value) -> !value.equals("x"),
            Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(t.out3 + "-store")
                .withKeySerde(STRING)
                .withValueSerde(STRING))
        .toStream()
        .to(t.out3, Produced.with(STRING, STRING));
    table
        .filter((key, value) -> !value.equals("x"))
        .groupBy((key, value) -> KeyValue.pair(value, key), Grouped.with(STRING, STRING))
        .count(Materialized.with(STRING, LONG))
        .toStream()
        .to(t.out4, Produced.with(STRING, LONG));
  }

  /**
   * Inner, left and outer windowed joins, same grace as the session windows: {@code
   * stream-stream-join} before = gap / 2, after = gap; {@code -reversed} before = gap, after = gap
   * / 2; {@code -symmetric} gap / 2 both ways.
   */
  private static void streamStreamJoins(final StreamsBuilder builder, final Instance t) {
    final long gap = t.windows.inactivityGap();
    final Duration grace = Duration.ofMillis(t.windows.gracePeriodMs());
    final JoinWindows windows =
        switch (t.type) {
          case "stream-stream-join" ->
              JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(gap / 2), grace)
                  .after(Duration.ofMillis(gap));
          case "stream-stream-join-reversed" ->
              JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(gap), grace)
                  .after(Duration.ofMillis(gap / 2));
          default -> JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(gap / 2), grace);
        };
    final KStream<String, String> left = stream(builder, t.in);
    final KStream<String, String> right = stream(builder, t.in2);
    final StreamJoined<String, String, String> serdes = StreamJoined.with(STRING, STRING, STRING);
    left.join(right, (a, b) -> a + "|" + b, windows, serdes)
        .to(t.out, Produced.with(STRING, STRING));
    left.leftJoin(right, (a, b) -> a + "|" + b, windows, serdes)
        .to(t.out2, Produced.with(STRING, STRING));
    left.outerJoin(right, (a, b) -> a + "|" + b, windows, serdes)
        .to(t.out3, Produced.with(STRING, STRING));
  }

  /**
   * Flat maps (a second record under a derived key; one or two values), then a split: by a
   * predicate, by position, and the default branch. Control records are left out first: the
   * runtime never sees them as data, and here they would make records under a derived key.
   */
  private static void flatMapSplit(final StreamsBuilder builder, final Instance t) {
    final Map<String, KStream<String, String>> branches =
        stream(builder, t.in)
            .filterNot((key, value) -> SENTINEL.equals(key))
            .flatMap(
                (key, value) ->
                    value == null
                        ? List.<KeyValue<String, String>>of()
                        : List.of(KeyValue.pair(key, value), KeyValue.pair(key == null ? null : key + "x", value + "x")))
            .flatMapValues(
                value -> value.length() % 2 == 1 ? List.of(value) : List.of(value, value + "+"),
                Named.as("fmv"))
            .split(Named.as("split-"))
            .branch((key, value) -> value.endsWith("x"), Branched.as("x"))
            .branch((key, value) -> value.length() % 3 == 0)
            .defaultBranch();
    branches.get("split-x").to(t.out, Produced.with(STRING, STRING));
    branches.get("split-2").to(t.out2, Produced.with(STRING, STRING));
    branches.get("split-0").to(t.out3, Produced.with(STRING, STRING));
  }

  /** A record's user, {@code user:n} values' prefix (the key of a null value). */
  private static String user(final String key, final String value) {
    return value == null ? key : value.split(":")[0];
  }

  /** {@code groupBy} a user (a named repartition), and a flat map regrouped by key. */
  private static void groupByCount(final StreamsBuilder builder, final Instance t) {
    final KStream<String, String> in = stream(builder, t.in);
    in.groupBy(ConformanceApp::user, Grouped.with("by-user", STRING, STRING))
        .count(Materialized.with(STRING, LONG))
        .toStream()
        .to(t.out, Produced.with(STRING, LONG));
    in.flatMap(
            (key, value) ->
                value == null
                    ? List.<KeyValue<String, String>>of()
                    : List.of(
                        KeyValue.pair(value.split(":")[0], value),
                        KeyValue.pair(value.split(":")[0] + "!", value)))
        .groupByKey(Grouped.with(STRING, STRING))
        .count(Materialized.with(STRING, LONG))
        .toStream()
        .to(t.out2, Produced.with(STRING, LONG));
  }

  /**
   * A stream read as a table and suppressed for a gap of stream time; and one regrouped by user
   * first (repartitioned) read as a table.
   */
  private static void toTableSuppress(final StreamsBuilder builder, final Instance t) {
    final KStream<String, String> in = stream(builder, t.in);
    in.toTable(Materialized.with(STRING, STRING))
        .suppress(
            Suppressed.untilTimeLimit(
                Duration.ofMillis(t.gapMs), Suppressed.BufferConfig.unbounded()))
        .toStream()
        .to(t.out, Produced.with(STRING, STRING));
    in.selectKey(ConformanceApp::user)
        .toTable(Materialized.with(STRING, STRING))
        .toStream()
        .to(t.out2, Produced.with(STRING, STRING));
  }

  /**
   * Two inputs cogrouped; and both regrouped under keys of their own (two named repartitions),
   * so each key's updates come from one input in offset order.
   */
  private static void cogroup(final StreamsBuilder builder, final Instance t) {
    final KStream<String, String> left = stream(builder, t.in);
    final KStream<String, String> right = stream(builder, t.in2);
    left.groupByKey(Grouped.with(STRING, STRING))
        .<String>cogroup((key, value, aggregate) -> aggregate + "a" + value)
        .cogroup(
            right.groupByKey(Grouped.with(STRING, STRING)),
            (key, value, aggregate) -> aggregate + "b" + value)
        .aggregate(() -> "", Materialized.with(STRING, STRING))
        .toStream()
        .to(t.out, Produced.with(STRING, STRING));
    left.groupBy((key, value) -> key == null ? null : "s" + key, Grouped.with("cg-left", STRING, STRING))
        .<String>cogroup((key, value, aggregate) -> aggregate + "a" + value)
        .cogroup(
            right.groupBy((key, value) -> key == null ? null : "r" + key, Grouped.with("cg-right", STRING, STRING)),
            (key, value, aggregate) -> aggregate + "b" + value)
        .aggregate(() -> "", Materialized.with(STRING, STRING))
        .toStream()
        .to(t.out2, Produced.with(STRING, STRING));
  }

  /** Two inputs cogrouped into tumbling windows or sessions: every update, and final results. */
  private static void cogroupWindowed(final StreamsBuilder builder, final Instance t) {
    final CogroupedKStream<String, String> cogrouped =
        stream(builder, t.in)
            .groupByKey(Grouped.with(STRING, STRING))
            .<String>cogroup((key, value, aggregate) -> aggregate + "a" + value)
            .cogroup(
                stream(builder, t.in2).groupByKey(Grouped.with(STRING, STRING)),
                (key, value, aggregate) -> aggregate + "b" + value);
    final KTable<Windowed<String>, String> table;
    final Serde<Windowed<String>> keySerde;
    if (t.type.equals("cogroup-session")) {
      table =
          cogrouped
              .windowedBy(t.windows)
              .aggregate(() -> "", (key, a, b) -> a + b, Materialized.with(STRING, STRING));
      keySerde = SESSION_KEY;
    } else {
      table =
          cogrouped
              .windowedBy(
                  TimeWindows.ofSizeAndGrace(
                      Duration.ofMillis(t.gapMs), Duration.ofMillis(t.graceMs)))
              .aggregate(() -> "", Materialized.with(STRING, STRING));
      keySerde = new WindowedSerdes.TimeWindowedSerde<>(Serdes.String(), t.gapMs);
    }
    table.toStream().to(t.out, Produced.with(keySerde, STRING));
    table
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .to(t.out2, Produced.with(keySerde, STRING));
  }

  private static SessionWindowedKStream<String, String> sessions(
      final KStream<String, String> stream, final Instance t) {
    return stream.groupByKey().windowedBy(t.windows);
  }
}
