/*
 * The heap Kafka's own RemoteLogMetadataCache holds for a partition's remote segments, measured
 * on a JVM with Kafka's jars: bench/metadata_cache.py compiles and runs this beside tierlog's
 * cache, on the same events.
 *
 * Usage: KafkaCacheHeap RECORDS OUT_DIR EXPECTED_SEGMENTS EXPECTED_EPOCHS REPEATS
 *
 * Writes OUT_DIR/kafka.json (the heap growth of each fill, the JVM's settings) and, for each fill,
 * the class histograms before and after it (MODE-RUN-before.txt, MODE-RUN-after.txt), which
 * bench/metadata_cache.py compares. Written out rather than kept, a histogram weighs nothing on
 * the heap being measured.
 *
 * RECORDS holds the partition's __remote_log_metadata record values in order, each an int32
 * (big-endian) length and the value as Kafka's RemoteLogMetadataSerde writes it (tierlog's serde
 * writes the same bytes). Every record is deserialized with Kafka's RemoteLogMetadataSerde and
 * applied as the TopicBasedRemoteLogMetadataManager's consumer applies it (through
 * RemotePartitionMetadataStore): a RemoteLogSegmentMetadata (COPY_SEGMENT_STARTED) with
 * addCopyInProgressSegment, a RemoteLogSegmentMetadataUpdate (COPY_SEGMENT_FINISHED,
 * DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED) with updateRemoteLogSegmentMetadata.
 *
 * Two modes, each filling a new cache from the same records:
 * - "rlmm": the objects exactly as deserialized, which is what a broker's cache holds (every
 *   record brings its own TopicIdPartition, TopicPartition and topic-name String);
 * - "shared_tip": each segment id re-pointed at one shared TopicIdPartition before it is added,
 *   the floor of what the cache's own structures need.
 *
 * The heap: used heap after full collections, read from the heap pools' collection usage (what
 * the collector left, so nothing allocated afterwards counts), before and after filling the
 * cache, the cache held from a static field meanwhile. Its growth divided by the cache's segments
 * is the figure. Run it with -XX:+UseSerialGC -XX:MarkSweepDeadRatio=0
 * -XX:MarkSweepAlwaysCompactCount=1: a System.gc() is then a stop-the-world mark-compact of the
 * whole heap that leaves live objects only (by default Serial's compaction may leave up to 5% of
 * the old generation as dead wood, filler int[] arrays counted as used, which made repeats differ
 * by up to 12 MB at 100,000 segments). The live-object class histograms before and after (what
 * jmap -histo:live prints) give the same growth object by object, a cross-check of the total
 * and its breakdown by class. A warm-up fill first loads and initializes every class involved
 * (the serde, the cache, logging, JMX) so that their static state is in the baseline.
 */
package org.apache.kafka.server.log.remote.metadata.storage;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;

import com.sun.management.HotSpotDiagnosticMXBean;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import javax.management.MBeanServer;
import javax.management.ObjectName;

public final class KafkaCacheHeap {

    private static final String[] MODES = {"rlmm", "shared_tip"};
    private static final int WARMUP_RECORDS = 20_000;

    /** The cache being measured: a static field keeps it strongly reachable across the GCs. */
    private static volatile RemoteLogMetadataCache held;

    private KafkaCacheHeap() {
    }

    private static final class Sample {
        long heapBytes;
        double replaySeconds;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: KafkaCacheHeap RECORDS OUT_DIR EXPECTED_SEGMENTS EXPECTED_EPOCHS REPEATS");
            System.exit(2);
        }
        Path records = Path.of(args[0]);
        Path outDir = Path.of(args[1]);
        int expectedSegments = Integer.parseInt(args[2]);
        int expectedEpochs = Integer.parseInt(args[3]);
        int repeats = Integer.parseInt(args[4]);
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();

        // Warm-up: every class, the logger, JMX and the histogram command, before any baseline.
        for (String mode : MODES) {
            fill(serde, records, mode, WARMUP_RECORDS);
        }
        Files.writeString(outDir.resolve("warm-up.txt"), histogram());
        usedHeapAfterGc();

        Map<String, List<Sample>> samples = new HashMap<>();
        int segments = -1;
        int epochs = -1;
        for (int r = 0; r < repeats; r++) {
            for (String mode : MODES) {
                Sample sample = new Sample();
                Files.writeString(outDir.resolve(mode + "-" + r + "-before.txt"), histogram());
                long before = usedHeapAfterGc();
                long t0 = System.nanoTime();
                held = fill(serde, records, mode, Integer.MAX_VALUE);
                sample.replaySeconds = (System.nanoTime() - t0) / 1e9;
                long after = usedHeapAfterGc();
                sample.heapBytes = after - before;
                Files.writeString(outDir.resolve(mode + "-" + r + "-after.txt"), histogram());
                segments = held.idToSegmentMetadata.size();
                epochs = held.leaderEpochEntries.size();
                held = null;
                if (segments != expectedSegments || epochs != expectedEpochs) {
                    throw new IllegalStateException("the " + mode + " cache holds " + segments
                        + " segments over " + epochs + " leader epochs, tierlog's " + expectedSegments
                        + " over " + expectedEpochs + ": the records were not applied as expected");
                }
                samples.computeIfAbsent(mode, m -> new ArrayList<>()).add(sample);
            }
        }
        Files.writeString(outDir.resolve("kafka.json"), json(samples, segments, epochs, records));
    }

    /** A new cache filled with the first {@code limit} records, as the RLMM's consumer fills it. */
    private static RemoteLogMetadataCache fill(RemoteLogMetadataSerde serde, Path records, String mode,
                                               int limit) throws Exception {
        RemoteLogMetadataCache cache = new RemoteLogMetadataCache();
        cache.markInitialized();
        TopicIdPartition sharedTip = null;
        boolean share = mode.equals("shared_tip");
        try (DataInputStream in = new DataInputStream(
                new BufferedInputStream(new FileInputStream(records.toFile()), 1 << 20))) {
            for (int i = 0; i < limit; i++) {
                int length;
                try {
                    length = in.readInt();
                } catch (EOFException end) {
                    break;
                }
                byte[] value = new byte[length];
                in.readFully(value);
                RemoteLogMetadata metadata = serde.deserialize(value);
                if (metadata instanceof RemoteLogSegmentMetadata segment) {
                    if (share) {
                        if (sharedTip == null) {
                            sharedTip = segment.topicIdPartition();
                        }
                        segment = new RemoteLogSegmentMetadata(
                            new RemoteLogSegmentId(sharedTip, segment.remoteLogSegmentId().id()),
                            segment.startOffset(), segment.endOffset(), segment.maxTimestampMs(),
                            segment.brokerId(), segment.eventTimestampMs(), segment.segmentSizeInBytes(),
                            segment.customMetadata(), segment.state(), segment.segmentLeaderEpochs(),
                            segment.isTxnIdxEmpty());
                    }
                    cache.addCopyInProgressSegment(segment);
                } else if (metadata instanceof RemoteLogSegmentMetadataUpdate update) {
                    cache.updateRemoteLogSegmentMetadata(update);
                } else {
                    throw new IllegalArgumentException("unexpected record " + metadata);
                }
            }
        }
        return cache;
    }

    /** Used heap once full collections have left only live objects (the collectors' own figure). */
    private static long usedHeapAfterGc() throws InterruptedException {
        long previous = -1;
        for (int i = 0; i < 10; i++) {
            System.gc();
            Thread.sleep(50);
            long used = 0;
            for (MemoryPoolMXBean pool : ManagementFactory.getMemoryPoolMXBeans()) {
                if (pool.getType() == MemoryType.HEAP && pool.getCollectionUsage() != null) {
                    used += pool.getCollectionUsage().getUsed();
                }
            }
            if (used == previous) {
                return used;
            }
            previous = used;
        }
        return previous;
    }

    /** The live objects by class (a full GC first), as {@code jmap -histo:live} prints them. */
    private static String histogram() throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        return (String) server.invoke(
            new ObjectName("com.sun.management:type=DiagnosticCommand"), "gcClassHistogram",
            new Object[] {new String[0]}, new String[] {String[].class.getName()});
    }

    private static String json(Map<String, List<Sample>> samples, int segments, int epochs, Path records)
            throws IOException {
        HotSpotDiagnosticMXBean hotspot = ManagementFactory.getPlatformMXBean(HotSpotDiagnosticMXBean.class);
        StringBuilder b = new StringBuilder("{\n");
        b.append("  \"segments\": ").append(segments).append(",\n");
        b.append("  \"leader_epochs\": ").append(epochs).append(",\n");
        b.append("  \"records_bytes\": ").append(Files.size(records)).append(",\n");
        b.append("  \"jvm\": {");
        b.append("\"version\": ").append(quote(System.getProperty("java.vm.version")));
        b.append(", \"vm\": ").append(quote(System.getProperty("java.vm.name")));
        b.append(", \"gc\": ").append(quote(gcNames()));
        for (String option : new String[] {"UseCompressedOops", "UseCompressedClassPointers",
                "ObjectAlignmentInBytes", "MaxHeapSize"}) {
            b.append(", ").append(quote(option)).append(": ")
                .append(quote(hotspot.getVMOption(option).getValue()));
        }
        b.append("},\n  \"modes\": {\n");
        boolean firstMode = true;
        for (String mode : MODES) {
            List<Sample> list = samples.get(mode);
            if (!firstMode) {
                b.append(",\n");
            }
            firstMode = false;
            b.append("    ").append(quote(mode)).append(": {\n");
            b.append("      \"heap_bytes\": ").append(longs(list, s -> s.heapBytes)).append(",\n");
            b.append("      \"replay_s\": [");
            for (int i = 0; i < list.size(); i++) {
                b.append(i == 0 ? "" : ", ").append(String.format(Locale.ROOT, "%.3f", list.get(i).replaySeconds));
            }
            b.append("]\n    }");
        }
        b.append("\n  }\n}\n");
        return b.toString();
    }

    private interface LongOf {
        long of(Sample sample);
    }

    private static String longs(List<Sample> list, LongOf f) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < list.size(); i++) {
            b.append(i == 0 ? "" : ", ").append(f.of(list.get(i)));
        }
        return b.append("]").toString();
    }

    private static String gcNames() {
        StringBuilder b = new StringBuilder();
        ManagementFactory.getGarbageCollectorMXBeans().forEach(
            gc -> b.append(b.length() == 0 ? "" : ", ").append(gc.getName()));
        return b.toString();
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
