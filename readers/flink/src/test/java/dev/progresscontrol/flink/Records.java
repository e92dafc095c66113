package dev.progresscontrol.flink;

import dev.progresscontrol.core.ControlRecordValidator;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.util.Collector;
import org.apache.flink.util.SimpleUserCodeClassLoader;
import org.apache.flink.util.UserCodeClassLoader;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/** Kafka records, ticks and collectors for the unit tests. */
final class Records {
    static final String TOPIC = "clicks";

    private Records() {}

    static ConsumerRecord<byte[], byte[]> data(int partition, long timestamp, String value) {
        return record(partition, timestamp, value.getBytes(StandardCharsets.UTF_8), new RecordHeaders());
    }

    static ConsumerRecord<byte[], byte[]> tick(int partition, long timestamp, byte[] header) {
        RecordHeaders headers = new RecordHeaders();
        headers.add(ProgressControl.HEADER, header);
        return record(partition, timestamp, null, headers);
    }

    /** A v1 header value: version 1, the sequence, the source id. */
    static byte[] v1(String source, long sequence) {
        byte[] id = source.getBytes(StandardCharsets.UTF_8);
        java.nio.ByteBuffer buffer = java.nio.ByteBuffer.allocate(10 + id.length);
        buffer.put((byte) 1).putLong(sequence).put((byte) id.length).put(id);
        return buffer.array();
    }

    /** A v2 header value signed with {@code secret} for {@code TOPIC[partition]} at {@code timestamp}. */
    static byte[] v2(String source, long sequence, String keyId, byte[] secret, int partition, long timestamp) {
        byte[] id = source.getBytes(StandardCharsets.UTF_8);
        byte[] kid = keyId.getBytes(StandardCharsets.UTF_8);
        byte[] mac = ControlRecordValidator.hmacSha256(
                secret, ControlRecordValidator.signedPayload(TOPIC, partition, timestamp, sequence, source));
        java.nio.ByteBuffer buffer = java.nio.ByteBuffer.allocate(10 + id.length + 1 + kid.length + 32);
        buffer.put((byte) 2).putLong(sequence).put((byte) id.length).put(id);
        buffer.put((byte) kid.length).put(kid).put(mac);
        return buffer.array();
    }

    static ConsumerRecord<byte[], byte[]> record(
            int partition, long timestamp, byte[] value, RecordHeaders headers) {
        return new ConsumerRecord<>(
                TOPIC, partition, 0L, timestamp, TimestampType.CREATE_TIME, 0,
                value == null ? 0 : value.length, null, value, headers, Optional.empty());
    }

    static DeserializationSchema.InitializationContext context() {
        return new DeserializationSchema.InitializationContext() {
            @Override
            public MetricGroup getMetricGroup() {
                return new UnregisteredMetricsGroup();
            }

            @Override
            public UserCodeClassLoader getUserCodeClassLoader() {
                return SimpleUserCodeClassLoader.create(Records.class.getClassLoader());
            }
        };
    }

    /** Collects into a list. */
    static final class ListCollector<T> implements Collector<T> {
        final List<T> items = new ArrayList<>();

        @Override
        public void collect(T record) {
            items.add(record);
        }

        @Override
        public void close() {}
    }
}
