import Glibc

// `basket-sync-bench --soak N`: N inbox events and N cart versions through one agent with a short
// retention and a small rotation size, one after the other. Prints the step time (cart renamed →
// notification line written) of the first and the last tenth, and at ten points the database, the
// inbox and the JSON Lines files' sizes and the agent's resident memory: what a year of running
// does to a step's cost and to storage (docs/spec.md §9).

/// Bytes of the regular files under `path` (not following links), and how many.
func treeSize(_ path: String) -> (bytes: Int, files: Int) {
    guard let directory = opendir(path) else { return (0, 0) }
    defer { closedir(directory) }
    var total = (bytes: 0, files: 0)
    while let entry = readdir(directory) {
        let name = withUnsafePointer(to: entry.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
        if name == "." || name == ".." { continue }
        var info = stat()
        guard lstat("\(path)/\(name)", &info) == 0 else { continue }
        if (info.st_mode & S_IFMT) == S_IFDIR {
            let inner = treeSize("\(path)/\(name)")
            total.bytes += inner.bytes
            total.files += inner.files
        } else if (info.st_mode & S_IFMT) == S_IFREG {
            total.bytes += Int(info.st_size)
            total.files += 1
        }
    }
    return total
}

func fileSize(_ path: String) -> Int {
    var info = stat()
    return lstat(path, &info) == 0 ? Int(info.st_size) : 0
}

func residentKiB(_ pid: pid_t) -> Int {
    let line = readFile("/proc/\(pid)/status").split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
    return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
}

func kib(_ bytes: Int) -> String { "\(bytes / 1024) KiB" }

func runSoak(count: Int, retentionSeconds: Double, rotateBytes: Int) -> Never {
    let directory = temporaryDirectory("soak")
    run([basketSync, "-C", directory, "init"])
    writeFile("\(directory)/basket-sync.json", """
        {"retention": {"days": \(retentionSeconds / 86_400)}, "rotate": {"maxBytes": \(rotateBytes), "keep": 2}}
        """)
    let started = WriteWatch(directory: directory, name: "outbox.jsonl")
    let agent = spawn([basketSync, "-C", directory, "watch", "--quiet"], stderrPath: "\(directory).log")
    run([basketSync, "-C", directory, "push", "--id", "start", "S0=+1"])
    guard started.wait() else { fail("the agent did not start in \(directory)") }
    let outbox = WriteWatch(directory: directory, name: "outbox.jsonl")
    let notifications = WriteWatch(directory: directory, name: "notifications.jsonl")

    var steps: [Double] = []
    steps.reserveCapacity(count)
    var points: [(Int, database: Int, inbox: (bytes: Int, files: Int), lines: Int, resident: Int)] = []
    let every = max(1, count / 10)
    let clock = monotonic()
    for index in 0..<count {
        // An event: one outbox record (seq index + 2; the start push was 1).
        let name = "e\(index)"
        writeFile("\(directory)/inbox/tmp/\(name)", "{\"id\":\"\(name)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"S\(index % 20)\",\"quantity\":1}]}")
        outbox.drain()
        rename("\(directory)/inbox/tmp/\(name)", "\(directory)/inbox/new/\(name)")
        guard outbox.wait(durable: false) else { fail("no outbox line for event \(index)") }
        // A cart version that acknowledges it: one notification.
        var cart = "{\"products\":[{\"id\":\"A\",\"quantity\":\(index + 1)}"
        for line in 0..<20 { cart += ",{\"id\":\"S\(line)\",\"quantity\":\(line % 5 + 1)}" }
        writeFile("\(directory)/.cart.tmp", cart + "],\"syncedThrough\":\(index + 2)}")
        notifications.drain()
        let start = monotonic()
        rename("\(directory)/.cart.tmp", "\(directory)/cart.json")
        guard notifications.wait(durable: false) else { fail("no notification for cart \(index)") }
        steps.append(monotonic() - start)
        if (index + 1) % every == 0 || index + 1 == count {
            let database = fileSize("\(directory)/.basket-sync/state.db") + fileSize("\(directory)/.basket-sync/state.db-wal")
            let lines = ["outbox", "notifications", "payments"].flatMap { name in ["", ".1", ".2"].map { "\(directory)/\(name).jsonl\($0)" } }.reduce(0) { $0 + fileSize($1) }
            points.append((index + 1, database, treeSize("\(directory)/inbox"), lines, residentKiB(agent)))
        }
    }
    let wall = monotonic() - clock
    stop(agent, SIGTERM)
    let tenth = max(1, count / 10)
    let first = percentile(Array(steps.prefix(tenth)), 0.5)
    let last = percentile(Array(steps.suffix(tenth)), 0.5)
    print("## basket-sync soak: \(count) events and \(count) cart versions\n")
    print("Machine: \(machine()). Retention \(retentionSeconds) s, rotate at \(rotateBytes) bytes keeping 2; \(ms(wall).dropLast(3)) ms in all.\n")
    print("- step (cart renamed → notification line written), p50 of the first tenth: \(ms(first)); of the last tenth: \(ms(last)); last / first: \(ratio(last / first))\n")
    print("| after | database (+ WAL) | inbox/ (files) | JSON Lines files (with rotated) | agent resident |")
    print("|---|---|---|---|---|")
    for point in points {
        print("| \(point.0) | \(kib(point.database)) | \(kib(point.inbox.bytes)) (\(point.inbox.files)) | \(kib(point.lines)) | \(point.resident) KiB |")
    }
    exit(0)
}
