package dev.progresscontrol.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The Java parser and validator against vectors the Python protocol decided
 * ({@code tests/readers/control_vectors.py}): same verdict, same marker, on every case. The
 * record's headers are given as a Kafka client gives them; like the companions, this test hands
 * the validator the values of the {@value ControlMarker#HEADER} ones (names match exactly).
 */
class ControlVectorsTest {
    private static final HexFormat HEX = HexFormat.of();

    @TestFactory
    Stream<DynamicTest> everyVectorIsDecidedAsPythonDecidesIt() throws Exception {
        JsonNode cases;
        try (InputStream in = getClass().getResourceAsStream("/progress-control-vectors.json")) {
            cases = new ObjectMapper().readTree(in).get("cases");
        }
        List<DynamicTest> tests = new ArrayList<>();
        cases.forEach(c -> tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> check(c))));
        assertFalse(tests.isEmpty());
        return tests.stream();
    }

    private static void check(JsonNode c) {
        List<byte[]> values = new ArrayList<>();
        for (JsonNode header : c.get("headers")) {
            if (header.get(0).asText().equals(ControlMarker.HEADER)) {
                JsonNode value = header.get(1);
                values.add(value.isNull() ? null : HEX.parseHex(value.asText()));
            }
        }
        long clock = c.get("clock_ms").asLong();
        ControlRecordValidator validator = new ControlRecordValidator(policy(c.get("policy")), () -> clock);
        Verdict verdict = validator.check(
                c.get("topic").asText(), c.get("partition").asInt(), c.get("timestamp_ms").asLong(), values);
        assertEquals(c.get("verdict").asText(), verdict.label());
        assertEquals(1, validator.count(verdict));

        JsonNode expected = c.get("marker");
        if (expected.isNull()) {
            assertThrows(MalformedControlHeaderException.class, () -> ControlMarker.fromHeaderValues(values));
            return;
        }
        ControlMarker marker = ControlMarker.fromHeaderValues(values);
        assertEquals(expected.get("version").asInt(), marker.version());
        assertEquals(expected.get("sequence").asText(), Long.toUnsignedString(marker.sequence()));
        assertEquals(expected.get("source_id").asText(), marker.sourceId());
        assertEquals(expected.get("key_id").isNull() ? null : expected.get("key_id").asText(), marker.keyId());
        if (expected.get("mac").isNull()) {
            assertNull(marker.mac());
        } else {
            assertArrayEquals(HEX.parseHex(expected.get("mac").asText()), marker.mac());
        }
    }

    /** The policy built the way an application writes it in code. */
    private static TrustPolicy policy(JsonNode spec) {
        TrustPolicy policy = TrustPolicy.defaults().withMaxSkew(Duration.ofMillis(spec.get("max_skew_ms").asLong()));
        for (Map.Entry<String, JsonNode> key : (Iterable<Map.Entry<String, JsonNode>>) spec.get("keys")::fields) {
            policy = policy.withVerificationKey(key.getKey(), HEX.parseHex(key.getValue().asText()));
        }
        JsonNode sources = spec.get("allowed_sources");
        if (!sources.isNull()) {
            List<String> ids = new ArrayList<>();
            sources.forEach(s -> ids.add(s.asText()));
            policy = policy.withAllowedSources(ids.toArray(String[]::new));
        }
        return policy;
    }
}
