// basket-sync-bench: cart renamed → notification line written with its record durable, for
// basket-sync, for the floor (a minimal C loop of inotify + read + fsync a record + append the
// line, built here with cc) and for an `inotifywait | jq` pipeline (whose record is its line: timed
// until the line is durable); inbox event → outbox line; cart size scaling; a burst of rewrites;
// idle cost. Prints one markdown report. `--quick` runs a tiny setting (the test suite's check).
import Glibc

// MARK: - Plumbing

func monotonic() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// The programs started and not yet stopped: a failing run stops them before it exits.
nonisolated(unsafe) var children: Set<pid_t> = []

func fail(_ message: String) -> Never {
    let bytes = Array("basket-sync-bench: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    for child in children { kill(child, SIGKILL) }
    exit(1)
}

func writeFile(_ path: String, _ text: String) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { fail("cannot write \(path): \(String(cString: strerror(errno)))") }
    let bytes = Array(text.utf8)
    var done = 0
    while done < bytes.count {
        let count = bytes[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if count <= 0 { fail("cannot write \(path)") }
        done += count
    }
    close(fd)
}

func readFile(_ path: String) -> String {
    guard let file = fopen(path, "r") else { return "" }
    defer { fclose(file) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = fread(&buffer, 1, buffer.count, file)
        if count <= 0 { break }
        result.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: result, as: UTF8.self)
}

/// Starts a program with its output sent to /dev/null (or stderr to a file).
func spawn(_ argv: [String], stderrPath: String = "/dev/null") -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    defer { posix_spawn_file_actions_destroy(&actions) }
    // A parent (a test runner) may block signals: give the child a clean mask and defaults.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigmask(&attributes, &empty)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    var pid = pid_t()
    var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
    defer { for pointer in cArgs { free(pointer) } }
    let result = posix_spawnp(&pid, argv[0], &actions, &attributes, &cArgs, environ)
    guard result == 0 else { fail("cannot start \(argv[0]): \(String(cString: strerror(result)))") }
    children.insert(pid)
    return pid
}

@discardableResult
func run(_ argv: [String]) -> Int32 {
    let pid = spawn(argv)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    return (status >> 8) & 0xFF
}

func stop(_ pid: pid_t, _ signal: Int32 = SIGKILL) {
    kill(pid, signal)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    children.remove(pid)
}

func onPath(_ tool: String) -> Bool {
    (getenv("PATH").map { String(cString: $0) } ?? "").split(separator: ":").contains { access("\($0)/\(tool)", X_OK) == 0 }
}

/// Waits until a line written to one file of a directory is durable: IN_MODIFY says it was
/// written, then an fsync of the file returns once its data is on disk (the writer's own fsync,
/// under way, is waited for). A writer that keeps its file open never closes it, so a close is
/// not the sign (basket-sync keeps its JSON Lines files open: closing them woke its own watch).
final class WriteWatch {
    let fd: Int32
    let name: String
    let path: String

    init(directory: String, name: String) {
        fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        self.name = name
        path = "\(directory)/\(name)"
        guard fd >= 0, inotify_add_watch(fd, directory, UInt32(IN_MODIFY)) >= 0 else { fail("inotify on \(directory)") }
    }

    deinit { close(fd) }

    /// True when `name` was written within `timeout` seconds, and is now durable (unless
    /// `durable` is false: written is enough).
    func wait(timeout: Double = 30, durable: Bool = true) -> Bool {
        guard written(timeout: timeout) else { return false }
        if !durable { return true }
        let file = open(path, O_RDONLY | O_CLOEXEC)
        guard file >= 0 else { return false }
        defer { close(file) }
        return fsync(file) == 0
    }

    private func written(timeout: Double) -> Bool {
        let deadline = monotonic() + timeout
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while monotonic() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, Int32(max(1, (deadline - monotonic()) * 1000)))
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { continue }
            var offset = 0
            var seen = false
            while offset < count {
                let length = buffer.withUnsafeBytes { Int($0.load(fromByteOffset: offset + 12, as: UInt32.self)) }
                let nameBytes = buffer[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }
                if String(decoding: nameBytes, as: UTF8.self) == name { seen = true }
                offset += 16 + length
            }
            if seen { return true }
        }
        return false
    }

    func drain() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

func ms(_ seconds: Double) -> String {
    let value = seconds * 1000
    if value.isNaN { return "—" }
    let places = value < 10 ? 2 : (value < 100 ? 1 : 0)
    var text = String(Int((value * pow(10, Double(places))).rounded()))
    if places > 0 {
        while text.count <= places { text = "0" + text }
        text.insert(".", at: text.index(text.endIndex, offsetBy: -places))
    }
    return text + " ms"
}

func ratio(_ value: Double) -> String {
    value.isNaN || value.isInfinite ? "—" : String(Int((value * 10).rounded()) / 10) + "." + String(Int((value * 10).rounded()) % 10) + "×"
}

func cartText(lines: Int, version: Int) -> String {
    var text = "{\"products\":[{\"id\":\"A\",\"quantity\":\(version)}"
    for index in 1..<max(1, lines) { text += ",{\"id\":\"sku-\(index)\",\"quantity\":\(index % 5 + 1)}" }
    return text + "],\"syncedThrough\":1}"
}

/// Renames `samples` carts into place one after the other and times each one until the
/// notification line is durable. Version numbers start at `from`.
func timeCarts(_ directory: String, lines: Int, samples: Int, from: Int, durable: Bool = false) -> [Double] {
    timeRenames(directory, output: "notifications.jsonl", samples: samples, durable: durable) { sample in
        writeFile("\(directory)/.cart.tmp", cartText(lines: lines, version: from + sample))
        return ("\(directory)/.cart.tmp", "\(directory)/cart.json")
    }
}

/// Times `samples` renames (the files `prepare` writes) each until a line is written to `output`
/// in `directory` (with `durable`, until it is durable: for a writer whose record is the line).
func timeRenames(_ directory: String, output: String, samples: Int, durable: Bool = false, prepare: (Int) -> (from: String, to: String)) -> [Double] {
    let watch = WriteWatch(directory: directory, name: output)
    var latencies: [Double] = []
    for sample in 0..<samples {
        let (from, to) = prepare(sample)
        watch.drain()
        let start = monotonic()
        rename(from, to)
        guard watch.wait(durable: durable) else { fail("no line in \(directory)/\(output) after renaming \(from)") }
        latencies.append(monotonic() - start)
        usleep(2_000)
    }
    return latencies
}

func temporaryDirectory(_ label: String) -> String {
    var template = Array("/tmp/basket-sync-bench-\(label)-XXXXXX".utf8CString)
    guard mkdtemp(&template) != nil else { fail("mkdtemp") }
    return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

// MARK: - Contenders

let quick = CommandLine.arguments.contains("--quick")
let samples = quick ? 5 : 300
let executableDirectory: String = {
    var buffer = [CChar](repeating: 0, count: 4096)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    let path = String(decoding: buffer[0..<max(0, count)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
}()
let basketSync = "\(executableDirectory)/basket-sync"
guard access(basketSync, X_OK) == 0 else { fail("\(basketSync) is missing: build the basket-sync product first") }

// `--soak N [--retention-seconds S] [--rotate-bytes B]`: the long-running check instead (Soak.swift).
if let flag = CommandLine.arguments.firstIndex(of: "--soak") {
    func option(_ name: String, _ fallback: Double) -> Double {
        CommandLine.arguments.firstIndex(of: name).flatMap { $0 + 1 < CommandLine.arguments.count ? Double(CommandLine.arguments[$0 + 1]) : nil } ?? fallback
    }
    guard flag + 1 < CommandLine.arguments.count, let count = Int(CommandLine.arguments[flag + 1]), count > 0 else {
        fail("usage: basket-sync-bench --soak N [--retention-seconds S] [--rotate-bytes B]")
    }
    runSoak(count: count, retentionSeconds: option("--retention-seconds", 30), rotateBytes: Int(option("--rotate-bytes", 1_048_576)))
}

// `--tree [--carts N] [--seconds S] [--rate R] [--events E]`: one agent over a tree of carts (TreeBench.swift).
if CommandLine.arguments.contains("--tree") {
    func option(_ name: String, _ fallback: Double) -> Double {
        CommandLine.arguments.firstIndex(of: name).flatMap { $0 + 1 < CommandLine.arguments.count ? Double(CommandLine.arguments[$0 + 1]) : nil } ?? fallback
    }
    runTreeBench(carts: Int(option("--carts", quick ? 20 : 10_000)), seconds: option("--seconds", quick ? 2 : 60),
                 rate: option("--rate", quick ? 50 : 1_000), events: option("--events", quick ? 10 : 200))
}

/// A sync directory with the agent running and A made Mealz-related: every cart changes A.
func startAgent(_ directory: String) -> pid_t {
    run([basketSync, "-C", directory, "init"])
    let watch = WriteWatch(directory: directory, name: "outbox.jsonl")
    let pid = spawn([basketSync, "-C", directory, "watch"], stderrPath: "\(directory)/../\(directory.split(separator: "/").last!).log")
    run([basketSync, "-C", directory, "push", "A=+1"])
    guard watch.wait() else { fail("the agent did not start in \(directory)") }
    return pid
}

let floorSource = """
    #include <fcntl.h>
    #include <stdio.h>
    #include <string.h>
    #include <sys/inotify.h>
    #include <unistd.h>
    static char cart[1 << 25];
    int main(int argc, char **argv) {
        if (argc < 2 || chdir(argv[1]) != 0) return 1;
        int records = open("records", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        int out = open("notifications.jsonl", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        int in = inotify_init1(IN_CLOEXEC);
        inotify_add_watch(in, ".", IN_MOVED_TO | IN_CLOSE_WRITE);
        char events[65536] __attribute__((aligned(8)));
        for (;;) {
            ssize_t n = read(in, events, sizeof events);
            for (char *p = events; p < events + n; ) {
                struct inotify_event *e = (struct inotify_event *)p;
                p += sizeof *e + e->len;
                if (!e->len || strcmp(e->name, "cart.json")) continue;
                int fd = open("cart.json", O_RDONLY | O_CLOEXEC);
                ssize_t size = 0, got;
                while (fd >= 0 && (got = read(fd, cart + size, sizeof cart - size)) > 0) size += got;
                if (fd >= 0) close(fd);
                char line[64];
                int length = snprintf(line, sizeof line, "{\\"bytes\\":%zd}\\n", size);
                if (write(records, line, length) != length || fsync(records) != 0) return 2;
                if (write(out, line, length) != length) return 2;
            }
        }
    }
    """

func buildFloor() -> String? {
    guard onPath("cc") else { return nil }
    let directory = temporaryDirectory("floor-build")
    writeFile("\(directory)/floor.c", floorSource)
    return run(["cc", "-O2", "-o", "\(directory)/floor", "\(directory)/floor.c"]) == 0 ? "\(directory)/floor" : nil
}

let pipelineScript = """
    cd "$1" && inotifywait -m -q -e moved_to --format %f "$1" | while read -r f; do
      [ "$f" = cart.json ] || continue
      jq -c '{type: "notifyRetailerBasketChanged", products: [.products[] | select(.id == "A")], syncedThrough}' cart.json |
        dd of=notifications.jsonl oflag=append conv=notrunc,fsync status=none
    done
    """

// MARK: - Runs

struct Row { var name: String; var latencies: [Double] }
var rows: [Row] = []

/// Calls `body` with the `/proc` folder of each thread of `pid`.
func eachThread(of pid: pid_t, _ body: (String) -> Void) {
    guard let tasks = opendir("/proc/\(pid)/task") else { return }
    defer { closedir(tasks) }
    while let entry = readdir(tasks) {
        let name = withUnsafePointer(to: entry.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
        guard name.first?.isNumber == true else { continue }
        body("/proc/\(pid)/task/\(name)")
    }
}

/// The CPU time of every thread of `pid` so far, in seconds (`/proc/PID/task/*/schedstat`: time
/// on a CPU in nanoseconds, user and kernel together; exact, where `/proc/PID/stat` counts ticks).
func cpuSeconds(_ pid: pid_t) -> Double {
    var total = 0.0
    eachThread(of: pid) { total += Double(readFile("\($0)/schedstat").split(separator: " ").first ?? "") ?? 0 }
    return total / 1e9
}

/// Times `samples` carts into `directory` as ``timeCarts`` does, and the CPU time `pid` spent a
/// change meanwhile (what the p50 holds besides the fsync and the wake-ups).
func timeCartsWithCPU(_ directory: String, pid: pid_t, samples: Int, from: Int) -> (latencies: [Double], cpu: Double) {
    let before = cpuSeconds(pid)
    let latencies = timeCarts(directory, lines: 50, samples: samples, from: from)
    usleep(100_000)  // what follows a change's line (its note) counted with it
    return (latencies, (cpuSeconds(pid) - before) / Double(samples))
}

let agentDirectory = temporaryDirectory("agent")
let agent = startAgent(agentDirectory)
_ = timeCarts(agentDirectory, lines: 50, samples: quick ? 2 : 20, from: 1)  // warm-up
var agentCPUPerChange = Double.nan
rows.append(Row(name: "basket-sync watch, new sync directory", latencies: timeCarts(agentDirectory, lines: 50, samples: samples, from: 100)))
// A long-running agent: SQLite's WAL has wrapped once (its first checkpoint after ~1,000 pages)
// and is overwritten in place from then on, which makes each commit's fdatasync cheaper.
if !quick {
    _ = timeCarts(agentDirectory, lines: 50, samples: 700, from: 1_000)
    let steady = timeCartsWithCPU(agentDirectory, pid: agent, samples: samples, from: 2_000)
    rows.append(Row(name: "basket-sync watch, steady state (WAL wrapped)", latencies: steady.latencies))
    agentCPUPerChange = steady.cpu
}

var floorLatencies: [Double] = []
var floorCPUPerChange = Double.nan
if let floor = buildFloor() {
    let directory = temporaryDirectory("floor")
    let pid = spawn([floor, directory])
    usleep(100_000)
    _ = timeCarts(directory, lines: 50, samples: quick ? 2 : 20, from: 1)
    (floorLatencies, floorCPUPerChange) = timeCartsWithCPU(directory, pid: pid, samples: samples, from: 100)
    rows.append(Row(name: "floor: C inotify + read + fsync a record + append the line", latencies: floorLatencies))
    stop(pid)
}

var pipelineLatencies: [Double] = []
if onPath("inotifywait") && onPath("jq") {
    let directory = temporaryDirectory("pipeline")
    let pid = spawn(["sh", "-c", pipelineScript, "sh", directory])
    usleep(300_000)
    _ = timeCarts(directory, lines: 50, samples: 2, from: 1)
    pipelineLatencies = timeCarts(directory, lines: 50, samples: quick ? 5 : 100, from: 100, durable: true)
    rows.append(Row(name: "inotifywait piped into jq", latencies: pipelineLatencies))
    stop(pid)
    run(["pkill", "-f", "inotifywait -m -q -e moved_to --format %f \(directory)"])
}

// Inbox event → outbox line written (its record durable).
let inboxLatencies = timeRenames(agentDirectory, output: "outbox.jsonl", samples: quick ? 5 : 200) { index in
    let name = "bench-\(index)"
    writeFile("\(agentDirectory)/inbox/tmp/\(name)", "{\"id\":\"\(name)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"B\",\"quantity\":1}]}")
    return ("\(agentDirectory)/inbox/tmp/\(name)", "\(agentDirectory)/inbox/new/\(name)")
}

// Cart size scaling.
let sizes = quick ? [10, 100] : [10, 100, 1_000, 10_000, 100_000]
var scaling: [(Int, Double, Double)] = []
for (index, size) in sizes.enumerated() {
    let times = timeCarts(agentDirectory, lines: size, samples: quick ? 2 : (size >= 100_000 ? 5 : 15), from: 10_000 * (index + 1))
    var floorTime = Double.nan
    if let floor = buildFloor() {
        let directory = temporaryDirectory("floor-\(size)")
        let pid = spawn([floor, directory])
        usleep(50_000)
        floorTime = percentile(timeCarts(directory, lines: size, samples: quick ? 2 : 5, from: 1), 0.5)
        stop(pid)
    }
    scaling.append((size, percentile(times, 0.5), floorTime))
}

// Burst: rewrites as fast as a host can write, CPU time of the agent, and the last one wins.
func cpuTicks(_ pid: pid_t) -> Int {
    let fields = readFile("/proc/\(pid)/stat").split(separator: ")").last?.split(separator: " ") ?? []
    guard fields.count > 12 else { return 0 }
    return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
}
let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
let burstCount = quick ? 20 : 1_000
let burstStart = cpuTicks(agent)
let burstClock = monotonic()
for version in 1...burstCount {
    writeFile("\(agentDirectory)/.cart.tmp", cartText(lines: 50, version: 500_000 + version))
    rename("\(agentDirectory)/.cart.tmp", "\(agentDirectory)/cart.json")
}
let lastVersion = 500_000 + burstCount
var lastNotified = false
let burstDeadline = monotonic() + 60
while monotonic() < burstDeadline {
    if let line = readFile("\(agentDirectory)/notifications.jsonl").split(separator: "\n").last,
       line.contains("{\"id\":\"A\",\"quantity\":\(lastVersion)}") { lastNotified = true; break }
    usleep(2_000)
}
let burstWall = monotonic() - burstClock
let burstCPU = Double(cpuTicks(agent) - burstStart) / ticksPerSecond

// Events queued while nothing ran (a cron host), then one `sync`: 1,000 and 4,000, median of 5
// runs each (the events on 50 SKUs, nothing echoed: the pending batches pile up as they would).
func timeQueuedSync(_ count: Int) -> Double {
    var times: [Double] = []
    for _ in 0..<(quick ? 1 : 5) {
        let directory = temporaryDirectory("queued")
        guard run([basketSync, "-C", directory, "init"]) == 0 else { fail("init failed in \(directory)") }
        for index in 1...count {
            writeFile("\(directory)/inbox/new/e\(index)", "{\"id\":\"e\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"S\(index % 50)\",\"quantity\":1}]}\n")
        }
        let began = monotonic()
        guard run([basketSync, "-C", directory, "sync"]) == 0 else { fail("sync of \(count) queued events failed in \(directory)") }
        times.append(monotonic() - began)
        let lines = readFile("\(directory)/outbox.jsonl").split(separator: "\n").count
        guard lines == count else { fail("\(count) queued events gave \(lines) outbox lines in \(directory)") }
        run(["rm", "-rf", directory])
    }
    return percentile(times, 0.5)
}
let queuedCounts = quick ? [50] : [1_000, 4_000]
let queued = queuedCounts.map { ($0, timeQueuedSync($0)) }

// Idle: nothing happens; count the agent's context switches and CPU, read its resident memory.
func contextSwitches(_ pid: pid_t) -> Int {
    var total = 0
    eachThread(of: pid) { thread in
        for line in readFile("\(thread)/status").split(separator: "\n") where line.contains("ctxt_switches") {
            total += Int(line.split(separator: "\t").last?.trimmingPrefix(" ") ?? "") ?? 0
        }
    }
    return total
}
let idleSeconds = quick ? 0.5 : 10.0
usleep(200_000)
let switchesBefore = contextSwitches(agent)
let ticksBefore = cpuTicks(agent)
usleep(UInt32(idleSeconds * 1_000_000))
let idleSwitches = contextSwitches(agent) - switchesBefore
let idleCPU = Double(cpuTicks(agent) - ticksBefore) / ticksPerSecond
let build = linkage(agent)
let resident = readFile("/proc/\(agent)/status").split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?
    .split(separator: " ").dropFirst().first.map(String.init) ?? "?"
stop(agent, SIGTERM)

// MARK: - Report

/// Which build of basket-sync the agent `pid` runs: `scripts/package` leaves a static binary in
/// `.build/release/`, `swift build -c release` a dynamic one; their memory and start differ.
func linkage(_ pid: pid_t) -> String {
    let runtime = readFile("/proc/\(pid)/maps").split(separator: "\n").lazy
        .compactMap { $0.split(separator: " ", omittingEmptySubsequences: true).last }
        .first { $0.hasSuffix("/libswiftCore.so") }
    guard let runtime else { return "\(basketSync) (static: the Swift runtime linked in)" }
    return "\(basketSync) (dynamic: the Swift runtime loaded from \(runtime.dropLast("/libswiftCore.so".count)))"
}

func machine() -> String {
    let model = readFile("/proc/cpuinfo").split(separator: "\n").first { $0.hasPrefix("model name") }?
        .split(separator: ":").last.map { String($0.drop { $0 == " " }) } ?? "unknown CPU"
    var name = utsname()
    uname(&name)
    let kernel = withUnsafePointer(to: name.release) { $0.withMemoryRebound(to: CChar.self, capacity: 65) { String(cString: $0) } }
    return "\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores (\(model)), Linux \(kernel), files in /tmp"
}

print("## basket-sync benchmark\(quick ? " (quick setting: tiny samples, not figures)" : "")\n")
print("Machine: \(machine()). \(samples) samples per contender unless said.\n")
print("Binary: \(build).\n")
print("### Cart renamed → notification line written, its record durable (50-line cart)\n")
print("Each side is charged what its guarantee needs: basket-sync and the floor fsync a record, then write the line (timed until the line is written); the pipeline's record is its line (timed until the line is durable).\n")
print("| contender | p50 | p90 | p99 |")
print("|---|---|---|---|")
for row in rows {
    print("| \(row.name) | \(ms(percentile(row.latencies, 0.5))) | \(ms(percentile(row.latencies, 0.9))) | \(ms(percentile(row.latencies, 0.99))) |")
}
let ours = percentile(rows[quick ? 0 : 1].latencies, 0.5)
print("")
if !floorLatencies.isEmpty { print("- basket-sync\(quick ? "" : " (steady state)") p50 / floor p50: \(ratio(ours / percentile(floorLatencies, 0.5)))") }
if !pipelineLatencies.isEmpty { print("- inotifywait piped into jq, p50 / basket-sync\(quick ? "" : " (steady state)") p50: \(ratio(percentile(pipelineLatencies, 0.5) / ours)) (\(pipelineLatencies.count) samples)") }
if pipelineLatencies.isEmpty { print("- inotifywait piped into jq: not measured (inotify-tools and jq not installed)") }
if !agentCPUPerChange.isNaN && !floorCPUPerChange.isNaN {
    print("- CPU time a change (every thread, user and kernel; the floor parses nothing and keeps no state): basket-sync \(ms(agentCPUPerChange)), floor \(ms(floorCPUPerChange)); 1.2× the floor's p50 would leave basket-sync \(ms(percentile(floorLatencies, 0.5) * 0.2)) of its own")
}
print("\n### Inbox event renamed into new/ → outbox line written, its record durable\n")
print("| p50 | p90 | p99 |")
print("|---|---|---|")
print("| \(ms(percentile(inboxLatencies, 0.5))) | \(ms(percentile(inboxLatencies, 0.9))) | \(ms(percentile(inboxLatencies, 0.99))) |")
print("\n### Cart size → notification (p50)\n")
print("| lines | basket-sync | floor | per 1,000 lines |")
print("|---|---|---|---|")
for (size, time, floorTime) in scaling {
    print("| \(size) | \(ms(time)) | \(ms(floorTime)) | \(ms(time / Double(size) * 1000)) |")
}
print("\n### Burst of \(burstCount) rewrites, as fast as the host can rename\n")
print("- wall time until the last version is notified: \(ms(burstWall)); agent CPU time: \(ms(burstCPU))")
print("- the last version (A=\(lastVersion)) was the one notified last: \(lastNotified ? "yes" : "NO")")
print("\n### Events queued in inbox/new/, then one `sync` (median of \(quick ? 1 : 5) runs)\n")
for (count, time) in queued { print("- \(count) events: \(ms(time)) (\(ms(time / Double(count))) per event)") }
if let first = queued.first, let last = queued.last, last.0 > first.0 {
    print("- \(last.0) events / \(first.0): \(ratio(last.1 / first.1)) the time for \(last.0 / first.0)× the events (target: at most \(ratio(Double(last.0 / first.0) * 1.125)))")
}
print("\n### Idle, \(idleSeconds) s with nothing happening\n")
print("- context switches: \(idleSwitches) (\(ratio(Double(idleSwitches) / idleSeconds).dropLast()) per second); CPU time: \(ms(idleCPU)); resident memory: \(resident) KiB")
exit(lastNotified ? 0 : 1)
