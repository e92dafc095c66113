package dev.progresscontrol.kafka.streams;

import dev.progresscontrol.core.ControlRecordValidator;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;

/** Control-record headers for the tests, encoded as the Python protocol does. */
final class Ticks {

    private Ticks() {
    }

    static byte[] v1(String source, long sequence) {
        byte[] id = source.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(10 + id.length).put((byte) 1).putLong(sequence).put((byte) id.length).put(id).array();
    }

    static byte[] v2(String source, long sequence, String keyId, byte[] secret,
                     String topic, int partition, long timestampMs) {
        byte[] id = source.getBytes(StandardCharsets.UTF_8);
        byte[] kid = keyId.getBytes(StandardCharsets.UTF_8);
        byte[] mac = ControlRecordValidator.hmacSha256(secret,
                ControlRecordValidator.signedPayload(topic, partition, timestampMs, sequence, source));
        return ByteBuffer.allocate(10 + id.length + 1 + kid.length + 32)
                .put((byte) 2).putLong(sequence).put((byte) id.length).put(id)
                .put((byte) kid.length).put(kid).put(mac).array();
    }

    static Headers headers(byte[] marker) {
        RecordHeaders headers = new RecordHeaders();
        headers.add(ProgressControl.HEADER, marker);
        return headers;
    }
}
