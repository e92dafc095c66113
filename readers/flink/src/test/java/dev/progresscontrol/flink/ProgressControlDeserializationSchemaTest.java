package dev.progresscontrol.flink;

import dev.progresscontrol.core.TrustPolicy;
import dev.progresscontrol.core.Verdict;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.flink.api.common.serialization.AbstractDeserializationSchema;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.EitherTypeInfo;
import org.apache.flink.types.Either;
import org.junit.jupiter.api.Test;

class ProgressControlDeserializationSchemaTest {
    private static final long NOW = 1_750_000_000_000L;
    private static final byte[] SECRET = "0123456789abcdef-secret".getBytes(StandardCharsets.UTF_8);

    /** An application schema that fails on anything but a data value, as a user's would. */
    static final class Clicks extends AbstractDeserializationSchema<String> {
        private static final long serialVersionUID = 1L;

        @Override
        public String deserialize(byte[] message) {
            if (message == null) {
                throw new IllegalStateException("the application's schema saw a tick");
            }
            return new String(message, StandardCharsets.UTF_8);
        }
    }

    private static ProgressControlDeserializationSchema<String> opened(TrustPolicy policy)
            throws Exception {
        ProgressControlDeserializationSchema<String> schema = ProgressControlDeserializationSchema
                .valueOnly(new Clicks())
                .withTrustPolicy(policy)
                .withClock(() -> NOW);
        schema.open(Records.context());
        return schema;
    }

    @Test
    void dataIsLeftAndValidatedTicksAreRightWithTheirTimestamp() throws Exception {
        ProgressControlDeserializationSchema<String> schema = opened(TrustPolicy.defaults());
        Records.ListCollector<Either<String, Long>> out = new Records.ListCollector<>();
        schema.deserialize(Records.data(0, NOW - 10, "a"), out);
        schema.deserialize(Records.tick(0, NOW - 5, Records.v1("sidecar", 0)), out);
        schema.deserialize(Records.data(1, NOW - 4, "b"), out);
        assertEquals(List.of(Either.Left("a"), Either.Right(NOW - 5), Either.Left("b")), out.items);
        assertEquals(1, schema.validator().count(Verdict.ACCEPTED));
    }

    @Test
    void rejectedTicksProduceNothingAndAreCounted() throws Exception {
        ProgressControlDeserializationSchema<String> schema =
                opened(TrustPolicy.defaults().withMaxSkew(java.time.Duration.ofMinutes(1)));
        Records.ListCollector<Either<String, Long>> out = new Records.ListCollector<>();
        schema.deserialize(Records.tick(0, NOW + 60_001, Records.v1("sidecar", 0)), out);
        schema.deserialize(Records.tick(0, -1, Records.v1("sidecar", 1)), out);
        schema.deserialize(Records.tick(0, NOW, new byte[] {1, 2, 3}), out);
        schema.deserialize(Records.tick(0, NOW, null), out);
        assertEquals(List.of(), out.items);
        assertEquals(1, schema.validator().count(Verdict.FUTURE_TIMESTAMP));
        assertEquals(1, schema.validator().count(Verdict.NEGATIVE_TIMESTAMP));
        assertEquals(2, schema.validator().count(Verdict.MALFORMED));
    }

    @Test
    void withKeysOnlyTicksThatVerifyPass() throws Exception {
        ProgressControlDeserializationSchema<String> schema =
                opened(TrustPolicy.defaults().withVerificationKeys("k1:0123456789abcdef-secret"));
        Records.ListCollector<Either<String, Long>> out = new Records.ListCollector<>();
        long ts = NOW - 1_000;
        schema.deserialize(Records.tick(2, ts, Records.v2("sidecar", 4, "k1", SECRET, 2, ts)), out);
        schema.deserialize(Records.tick(2, ts, Records.v1("sidecar", 5)), out);
        // Signed for partition 2, replayed to partition 1: the signature does not cover it.
        schema.deserialize(Records.tick(1, ts, Records.v2("sidecar", 6, "k1", SECRET, 2, ts)), out);
        schema.deserialize(Records.tick(2, ts + 1, Records.v2("sidecar", 7, "k1", SECRET, 2, ts)), out);
        assertEquals(List.of(Either.Right(ts)), out.items);
        assertEquals(1, schema.validator().count(Verdict.UNSIGNED));
        assertEquals(2, schema.validator().count(Verdict.BAD_SIGNATURE));
    }

    @Test
    void aRecordWithAnyProgressControlHeaderNeverReachesTheApplication() throws Exception {
        ProgressControlDeserializationSchema<String> schema = opened(TrustPolicy.defaults());
        Records.ListCollector<Either<String, Long>> out = new Records.ListCollector<>();
        // A malformed header with a value: still not data (the Python readers skip it too).
        org.apache.kafka.common.header.internals.RecordHeaders headers =
                new org.apache.kafka.common.header.internals.RecordHeaders();
        headers.add(ProgressControl.HEADER, new byte[] {9});
        schema.deserialize(Records.record(0, NOW, "x".getBytes(StandardCharsets.UTF_8), headers), out);
        assertEquals(List.of(), out.items);
    }

    @Test
    void producedTypeIsTheApplicationsTypeOrATick() {
        assertEquals(
                new EitherTypeInfo<>(Types.STRING, Types.LONG),
                ProgressControlDeserializationSchema.valueOnly(new Clicks()).getProducedType());
    }

    @Test
    void validatorNeedsOpen() {
        assertThrows(
                IllegalStateException.class,
                () -> ProgressControlDeserializationSchema.valueOnly(new Clicks()).validator());
    }
}
