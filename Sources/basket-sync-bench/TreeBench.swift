import Glibc

// `basket-sync-bench --tree [--carts N] [--seconds S] [--rate R] [--events E]`: one agent over a
// tree of N carts (docs/spec.md §8). Prints the start with nothing changed, resident memory, idle
// wake-ups, one cart change → notification line, a sustained load (R cart changes per second
// over random carts plus E inbox events per second for S seconds: latency per second, backlog,
// every change notified), the disk's fsync rate, and the throughput ceiling (rates doubled until
// p99 passes 50 ms).

/// The latency of each cart change until its cart's notifications.jsonl is written, under a
/// load of `rate` changes and `events` inbox events per second for `seconds`.
struct LoadResult {
    var rate: Double
    /// Latencies per second of the run (by when the change was made).
    var perSecond: [[Double]]
    var all: [Double] { perSecond.flatMap { $0 } }
    /// Changes whose notification never came within the grace period.
    var unanswered: Int
    /// Carts whose last notification is not their last version.
    var wrongLast: Int
    var changes: Int
}

/// One inotify instance over every cart directory: which cart wrote its notifications.jsonl.
final class TreeWatch {
    let fd: Int32
    var cartOfWatch: [Int32: Int] = [:]

    init(root: String, carts: Int) {
        fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else { fail("inotify_init1") }
        for cart in 0..<carts {
            let watch = inotify_add_watch(fd, "\(root)/c\(cart)", UInt32(IN_MODIFY))
            guard watch >= 0 else { fail("inotify_add_watch on \(root)/c\(cart): \(String(cString: strerror(errno)))") }
            cartOfWatch[watch] = cart
        }
    }

    deinit { close(fd) }

    /// The carts whose notifications.jsonl was written since the last call, waiting up to `timeout` ms.
    func written(timeout: Int32) -> [Int] {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, timeout) > 0 else { return [] }
        var carts: [Int] = []
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            var offset = 0
            while offset < count {
                let watch = buffer.withUnsafeBytes { $0.load(fromByteOffset: offset, as: Int32.self) }
                let length = buffer.withUnsafeBytes { Int($0.load(fromByteOffset: offset + 12, as: UInt32.self)) }
                let name = String(decoding: buffer[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }, as: UTF8.self)
                if name == "notifications.jsonl", let cart = cartOfWatch[watch] { carts.append(cart) }
                offset += 16 + length
            }
        }
        return carts
    }
}

func treeCartText(version: Int) -> String {
    "{\"products\":[{\"id\":\"A\",\"quantity\":\(version)},{\"id\":\"X\",\"quantity\":2}],\"syncedThrough\":1}"
}

/// Runs a load against the agent serving `root` and measures each change.
func runLoad(root: String, carts: Int, watch: TreeWatch, rate: Double, events: Double, seconds: Double, versions: inout [Int], nextEvent: inout Int) -> LoadResult {
    var rng = SystemRandomNumberGenerator()
    var pending: [Int: Double] = [:]
    var perSecond: [[Double]] = Array(repeating: [], count: Int(seconds.rounded(.up)))
    var lastWritten: [Int: Int] = [:]
    let start = monotonic()
    let changeInterval = 1 / rate
    let eventInterval = events > 0 ? 1 / events : .infinity
    var nextChange = start, nextEventAt = start
    var changes = 0
    func collect(timeout: Int32) {
        for cart in watch.written(timeout: timeout) {
            guard let began = pending.removeValue(forKey: cart) else { continue }
            let second = min(perSecond.count - 1, Int(began - start))
            perSecond[second].append(monotonic() - began)
        }
    }
    while monotonic() < start + seconds {
        let now = monotonic()
        if now >= nextChange {
            let cart = Int.random(in: 0..<carts, using: &rng)
            versions[cart] += 1
            let directory = "\(root)/c\(cart)"
            writeFile("\(directory)/.cart.tmp", treeCartText(version: versions[cart]))
            rename("\(directory)/.cart.tmp", "\(directory)/cart.json")
            lastWritten[cart] = versions[cart]
            // A change to a cart already waiting is taken with it: the first one is timed.
            if pending[cart] == nil { pending[cart] = monotonic() }
            changes += 1
            nextChange += changeInterval
        }
        if now >= nextEventAt {
            let cart = Int.random(in: 0..<carts, using: &rng)
            let directory = "\(root)/c\(cart)/inbox"
            nextEvent += 1
            writeFile("\(directory)/tmp/load-\(nextEvent)", "{\"id\":\"load-\(nextEvent)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"B\",\"quantity\":1}]}\n")
            rename("\(directory)/tmp/load-\(nextEvent)", "\(directory)/new/load-\(nextEvent)")
            nextEventAt += eventInterval
        }
        let wait = min(nextChange, nextEventAt) - monotonic()
        collect(timeout: wait > 0.001 ? Int32(wait * 1000) : 0)
    }
    let grace = monotonic() + 30
    while !pending.isEmpty, monotonic() < grace { collect(timeout: 100) }
    // Every cart changed ends notified at its last version.
    var wrongLast = 0
    for (cart, version) in lastWritten {
        let last = readFile("\(root)/c\(cart)/notifications.jsonl").split(separator: "\n").last ?? ""
        if !last.contains("{\"id\":\"A\",\"quantity\":\(version)}") { wrongLast += 1 }
    }
    return LoadResult(rate: rate, perSecond: perSecond, unanswered: pending.count, wrongLast: wrongLast, changes: changes)
}

/// The tree's floor: one C process doing the same job as the agent over the same tree with the
/// same guarantee, and nothing else. A cart's new version: read it, fsync a record to one file of
/// its own, then append the cart to the cart's notifications.jsonl; an inbox event: read it, fsync
/// a record, append it to the cart's outbox.jsonl, move it to `inbox/cur/`. The lines are flushed
/// as the agent's are (docs/spec.md §6): one `syncfs` on a thread of its own, half a second after
/// the first line not flushed, never two at once.
let treeFloorSource = """
    #include <fcntl.h>
    #include <pthread.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <sys/inotify.h>
    #include <sys/stat.h>
    #include <time.h>
    #include <unistd.h>
    static int records;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
    static int pending;
    static struct timespec due;
    static void *flusher(void *unused) {
        for (;;) {
            pthread_mutex_lock(&lock);
            while (!pending) pthread_cond_wait(&wake, &lock);
            struct timespec when = due;
            pending = 0;
            pthread_mutex_unlock(&lock);
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when, NULL);
            if (syncfs(records) != 0) exit(3);
        }
        return unused;
    }
    static void written(void) {
        pthread_mutex_lock(&lock);
        if (!pending) {
            pending = 1;
            clock_gettime(CLOCK_MONOTONIC, &due);
            due.tv_nsec += 500000000;
            if (due.tv_nsec >= 1000000000) { due.tv_sec += 1; due.tv_nsec -= 1000000000; }
            pthread_cond_signal(&wake);
        }
        pthread_mutex_unlock(&lock);
    }
    static char text[1 << 20];
    /* Reads `path`, fsyncs a record of it, then appends it to `line`: 0 when done. */
    static int take(const char *path, const char *line) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        ssize_t size = 0, got;
        while ((got = read(fd, text + size, sizeof text - 1 - size)) > 0) size += got;
        close(fd);
        while (size > 0 && text[size - 1] == '\\n') size--;
        text[size++] = '\\n';
        if (write(records, text, size) != size || fsync(records) != 0) exit(2);
        int out = open(line, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (out < 0 || write(out, text, size) != size) exit(2);
        close(out);
        written();
        return 0;
    }
    int main(int argc, char **argv) {
        if (argc < 3 || chdir(argv[1]) != 0) return 1;
        int carts = atoi(argv[2]);
        records = open("records", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        int in = inotify_init1(IN_CLOEXEC);
        int *cartOf = calloc(4 * (size_t)carts + 16, sizeof(int));
        char *isInbox = calloc(4 * (size_t)carts + 16, 1);
        char path[512], target[512];
        for (int cart = 0; cart < carts; cart++) {
            snprintf(path, sizeof path, "c%d", cart);
            int watch = inotify_add_watch(in, path, IN_MOVED_TO | IN_CLOSE_WRITE);
            snprintf(path, sizeof path, "c%d/inbox/new", cart);
            int inbox = inotify_add_watch(in, path, IN_MOVED_TO);
            snprintf(path, sizeof path, "c%d/inbox/cur", cart);
            mkdir(path, 0755);
            if (watch < 0 || inbox < 0 || watch >= 4 * carts + 16 || inbox >= 4 * carts + 16) return 4;
            cartOf[watch] = cart;
            cartOf[inbox] = cart;
            isInbox[inbox] = 1;
        }
        pthread_t thread;
        pthread_create(&thread, NULL, flusher, NULL);
        fprintf(stderr, "ready\\n");
        static char events[1 << 16] __attribute__((aligned(8)));
        for (;;) {
            ssize_t n = read(in, events, sizeof events);
            for (char *p = events; p < events + n; ) {
                struct inotify_event *e = (struct inotify_event *)p;
                p += sizeof *e + e->len;
                if (!e->len) continue;
                int cart = cartOf[e->wd];
                if (isInbox[e->wd]) {
                    snprintf(path, sizeof path, "c%d/inbox/new/%s", cart, e->name);
                    snprintf(target, sizeof target, "c%d/outbox.jsonl", cart);
                    if (take(path, target) != 0) continue;
                    snprintf(target, sizeof target, "c%d/inbox/cur/%s", cart, e->name);
                    rename(path, target);
                } else if (!strcmp(e->name, "cart.json")) {
                    snprintf(path, sizeof path, "c%d/cart.json", cart);
                    snprintf(target, sizeof target, "c%d/notifications.jsonl", cart);
                    take(path, target);
                }
            }
        }
    }
    """

/// The tree's floor built with `cc`, or nil.
func buildTreeFloor() -> String? {
    guard onPath("cc") else { return nil }
    let directory = temporaryDirectory("tree-floor-build")
    writeFile("\(directory)/floor.c", treeFloorSource)
    return run(["cc", "-O2", "-pthread", "-o", "\(directory)/floor", "\(directory)/floor.c"]) == 0 ? "\(directory)/floor" : nil
}

/// The CPU (user + system seconds) of one look at every cart done as plainly as it can be — the
/// two `stat`s of each cart's `cart.json` and `inbox/new/` (docs/spec.md §10) from the tree's root
/// opened once, nothing else —, the median of five: a polled tree's floor, in cores at one look
/// a second.
func lookFloor(root: String, carts: Int) -> Double {
    let rootFd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard rootFd >= 0 else { return .nan }
    defer { close(rootFd) }
    let names = (0..<carts).map { (Array("c\($0)/cart.json".utf8CString), Array("c\($0)/inbox/new".utf8CString)) }
    func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
    }
    var rounds: [Double] = []
    var info = stat()
    for _ in 0..<5 {
        let before = cpuSeconds()
        for (cart, inbox) in names {
            _ = fstatat(rootFd, cart, &info, AT_SYMLINK_NOFOLLOW)
            _ = fstatat(rootFd, inbox, &info, AT_SYMLINK_NOFOLLOW)
        }
        rounds.append(cpuSeconds() - before)
    }
    return rounds.sorted()[2]
}

/// fsyncs per second of the disk under `directory`: one small append then fdatasync, repeated.
func fsyncRate(_ directory: String) -> Double {
    let path = "\(directory)/.fsync-probe"
    let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return .nan }
    defer { close(fd); unlink(path) }
    let start = monotonic()
    var count = 0
    while monotonic() < start + 2 {
        _ = write(fd, "x\n", 2)
        fdatasync(fd)
        count += 1
    }
    return Double(count) / (monotonic() - start)
}

func runTreeBench(carts: Int, seconds: Double, rate: Double, events: Double) -> Never {
    let root = temporaryDirectory("tree")
    guard run([basketSync, "-C", root, "init", "--tree"]) == 0 else { fail("init --tree failed") }
    // Every cart Mealz-related: an event A+1 waits in its inbox and its cart echoes it.
    for cart in 0..<carts {
        let directory = "\(root)/c\(cart)"
        for folder in ["", "/inbox", "/inbox/tmp", "/inbox/new"] { mkdir(directory + folder, 0o755) }
        writeFile("\(directory)/inbox/new/e1", "{\"id\":\"e1\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}\n")
        writeFile("\(directory)/cart.json", treeCartText(version: 1))
    }
    // The floor's own tree, the same carts: it runs beside the idle agent, after the same load.
    let floorRoot = temporaryDirectory("tree-floor")
    for cart in 0..<carts {
        let directory = "\(floorRoot)/c\(cart)"
        for folder in ["", "/inbox", "/inbox/tmp", "/inbox/new", "/inbox/cur"] { mkdir(directory + folder, 0o755) }
        writeFile("\(directory)/cart.json", treeCartText(version: 1))
    }
    let adoptStart = monotonic()
    guard run([basketSync, "-C", root, "sync"]) == 0 else { fail("the first sync of the tree failed") }
    let adoption = monotonic() - adoptStart
    // The carts were written over a second before the agent starts: certainly unchanged.
    usleep(1_100_000)

    let log = "\(root)/../\(root.split(separator: "/").last!).log"
    let startClock = monotonic()
    let agent = spawn([basketSync, "-C", root, "watch", "--quiet"], stderrPath: log)
    while !readFile(log).contains("watching the tree") {
        if monotonic() > startClock + 120 { fail("the agent did not start over the tree: \(readFile(log))") }
        usleep(1_000)
    }
    let startTime = monotonic() - startClock
    let residentAtStart = readFile("/proc/\(agent)/status").split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?
        .split(separator: " ").dropFirst().first.map(String.init) ?? "?"

    let idleSeconds = quick ? 1.0 : 10.0
    let build = linkage(agent)
    let switchesBefore = contextSwitches(agent)
    let ticksBefore = cpuTicks(agent)
    usleep(UInt32(idleSeconds * 1_000_000))
    let idleSwitches = contextSwitches(agent) - switchesBefore
    let idleCPU = Double(cpuTicks(agent) - ticksBefore) / Double(sysconf(Int32(_SC_CLK_TCK)))

    // One change at a time, in random carts.
    var versions = Array(repeating: 1, count: carts)
    var single: [Double] = []
    var rng = SystemRandomNumberGenerator()
    /// A new version of a random cart, timed from its rename until its notification line is
    /// written (its record is durable before: one fsync per change).
    func timeOneChange() -> Double {
        let cart = Int.random(in: 0..<carts, using: &rng)
        versions[cart] += 1
        let directory = "\(root)/c\(cart)"
        let watch = WriteWatch(directory: directory, name: "notifications.jsonl")
        writeFile("\(directory)/.cart.tmp", treeCartText(version: versions[cart]))
        let began = monotonic()
        rename("\(directory)/.cart.tmp", "\(directory)/cart.json")
        guard watch.wait(durable: false) else { fail("no notification in \(directory)") }
        return monotonic() - began
    }
    for _ in 0..<(quick ? 10 : 300) {
        single.append(timeOneChange())
        usleep(2_000)
    }

    let watch = TreeWatch(root: root, carts: carts)
    var nextEvent = 0
    // The floor's load just before the agent's and just after it, beside the idle agent (the
    // disk's own state moves the figures by 2x and more from one ten seconds to the next).
    let floor = buildTreeFloor()
    var floorVersions = Array(repeating: 1, count: carts)
    var floorEvent = 0
    func floorRun() -> LoadResult? {
        guard let floor else { return nil }
        let floorLog = floorRoot + ".log"
        unlink(floorLog)  // "ready" is this run's
        let pid = spawn([floor, floorRoot, String(carts)], stderrPath: floorLog)
        defer { stop(pid, SIGKILL) }
        let began = monotonic()
        while !readFile(floorLog).contains("ready"), monotonic() < began + 120 { usleep(10_000) }
        return runLoad(root: floorRoot, carts: carts, watch: TreeWatch(root: floorRoot, carts: carts), rate: rate, events: events, seconds: seconds, versions: &floorVersions, nextEvent: &floorEvent)
    }
    let floorLoadBefore = floorRun()
    let sustained = runLoad(root: root, carts: carts, watch: watch, rate: rate, events: events, seconds: seconds, versions: &versions, nextEvent: &nextEvent)
    let floorLoadAfter = floorRun()
    let floorLoads = [floorLoadBefore, floorLoadAfter].compactMap { $0 }
    run(["rm", "-rf", floorRoot, floorRoot + ".log"])
    let disk = fsyncRate(root)
    var ceiling: [LoadResult] = []
    var probe = rate
    while !quick {
        probe *= 2
        let result = runLoad(root: root, carts: carts, watch: watch, rate: probe, events: events, seconds: 10, versions: &versions, nextEvent: &nextEvent)
        ceiling.append(result)
        if percentile(result.all, 0.99) > 0.05 || result.unanswered > 0 || probe >= 64_000 { break }
    }
    let residentAfter = readFile("/proc/\(agent)/status").split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?
        .split(separator: " ").dropFirst().first.map(String.init) ?? "?"
    stop(agent, SIGTERM)

    // The same tree polled every second (docs/spec.md §10: as on a network file system): the CPU of the
    // looks while nothing changes, then one change at a time (seen at the next look).
    let pollLog = log + ".poll"
    // The floor measured just before the polling agent and just after it (the disk's writeback
    // after the loads slows the kernel's lookups for a while): the two medians' mean.
    let floorBefore = lookFloor(root: root, carts: carts)
    let polled = spawn([basketSync, "-C", root, "watch", "--quiet", "--poll=1000"], stderrPath: pollLog)
    let pollStart = monotonic()
    while !readFile(pollLog).contains("watching the tree") {
        if monotonic() > pollStart + 120 { fail("the polling agent did not start over the tree: \(readFile(pollLog))") }
        usleep(10_000)
    }
    usleep(3_000_000)  // the start's own changes settled
    let pollSeconds = quick ? 2.0 : 20.0
    let pollTicks = cpuTicks(polled)
    usleep(UInt32(pollSeconds * 1_000_000))
    let pollCPU = Double(cpuTicks(polled) - pollTicks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    var pollLatencies: [Double] = []
    for _ in 0..<(quick ? 3 : 20) {
        pollLatencies.append(timeOneChange())
        usleep(UInt32.random(in: 0..<300_000, using: &rng))
    }
    stop(polled, SIGTERM)
    let pollFloor = (floorBefore + lookFloor(root: root, carts: carts)) / 2

    print("## basket-sync benchmark: a tree of \(carts) carts\(quick ? " (quick setting: not figures)" : "")\n")
    print("Machine: \(machine()).\n")
    print("Binary: \(build).\n")
    print("- first pass over \(carts) new carts (`sync` on the root: adopt each, take its event and its cart): \(ms(adoption))")
    print("- agent start with nothing changed, until it says it watches: \(ms(startTime)); resident memory then: \(residentAtStart) KiB, after the loads: \(residentAfter) KiB")
    print("- idle \(idleSeconds) s: \(idleSwitches) context switches, CPU \(ms(idleCPU))")
    print("- one cart change → its notification line written, its record durable (\(single.count) changes in random carts): p50 \(ms(percentile(single, 0.5))), p90 \(ms(percentile(single, 0.9))), p99 \(ms(percentile(single, 0.99)))")
    func describe(_ result: LoadResult, seconds: Double) {
        let all = result.all
        let first = result.perSecond.first ?? [], last = result.perSecond.last ?? []
        print("| \(Int(result.rate)) /s + \(Int(events)) events/s, \(Int(seconds)) s | \(result.changes) | \(ms(percentile(all, 0.5))) | \(ms(percentile(all, 0.99))) | \(ms(percentile(first, 0.99))) → \(ms(percentile(last, 0.99))) | \(result.unanswered) | \(result.wrongLast) |")
    }
    print("\n| load | changes | p50 | p99 | p99 first second → last second | never notified | last version not the one notified |")
    print("|---|---|---|---|---|---|---|")
    describe(sustained, seconds: seconds)
    for result in ceiling { describe(result, seconds: 10) }
    if !floorLoads.isEmpty {
        print("\n| the floor (C: read, fsync a record, append the line; one `syncfs` half a second after a line), just before basket-sync's load, then just after | changes | p50 | p99 | p99 first second → last second | never notified | last version not the one notified |")
        print("|---|---|---|---|---|---|---|")
        for floorLoad in floorLoads { describe(floorLoad, seconds: seconds) }
        let floorP50 = floorLoads.map { percentile($0.all, 0.5) }.reduce(0, +) / Double(floorLoads.count)
        let floorP99 = floorLoads.map { percentile($0.all, 0.99) }.reduce(0, +) / Double(floorLoads.count)
        print("\n- \(Int(rate)) changes/s + \(Int(events)) events/s: basket-sync p50 / the floor's (the two runs' mean) \(ratio(percentile(sustained.all, 0.5) / floorP50)), p99 / the floor's \(ratio(percentile(sustained.all, 0.99) / floorP99))")
    }
    let held = ([sustained] + ceiling).filter { percentile($0.all, 0.99) <= 0.05 && $0.unanswered == 0 }.map(\.rate).max()
    print("\n- polled every 1000 ms (`watch --poll=1000`, as on a network file system): \(ms(pollCPU)) of CPU in \(Int(pollSeconds)) s idle = \(Double((pollCPU / pollSeconds * 1000).rounded()) / 1000) of one core (the floor, the same two `stat`s a cart from the tree's root and nothing else: \(Double((pollFloor * 1000).rounded()) / 1000) of one core, \(Double((pollCPU / pollSeconds / pollFloor * 100).rounded()) / 100)×); one cart change → its notification line (\(pollLatencies.count) changes): p50 \(ms(percentile(pollLatencies, 0.5))), max \(ms(pollLatencies.max() ?? 0))")
    print("\n- the disk here: \(Int(disk)) fsyncs per second (append + fdatasync, one after the other)")
    print("- throughput ceiling (the highest rate tried whose p99 stayed within 50 ms): \(held.map { "\(Int($0)) changes/s" } ?? "below \(Int(rate)) changes/s")")
    run(["rm", "-rf", root, log, pollLog])
    exit(sustained.unanswered == 0 && sustained.wrongLast == 0 ? 0 : 1)
}
