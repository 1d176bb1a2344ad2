import Foundation
import Testing

/// A fresh temporary directory per test, removed afterwards.
final class Playground {
    let root: URL

    init() throws {
        let template = FileManager.default.temporaryDirectory.appendingPathComponent("basket-sync-test-XXXXXX").path
        var bytes = Array(template.utf8CString)
        guard mkdtemp(&bytes) != nil else { throw CocoaError(.fileWriteUnknown) }
        root = URL(fileURLWithPath: String(decoding: bytes.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    deinit { try? FileManager.default.removeItem(at: root) }

    var path: String { root.path }

    func url(_ relative: String) -> URL { root.appendingPathComponent(relative) }

    func write(_ relative: String, _ text: String) throws {
        try Data(text.utf8).write(to: url(relative))
    }

    /// Writes a temp file and renames it into place, as a careful host does.
    func writeAtomically(_ relative: String, _ text: String) throws {
        try Data(text.utf8).write(to: url(relative), options: .atomic)
    }

    func read(_ relative: String) -> String {
        (try? String(contentsOf: url(relative), encoding: .utf8)) ?? ""
    }

    /// The complete lines of a JSON Lines file, parsed; a torn last line is not taken.
    func records(_ relative: String) -> [[String: Any]] {
        let text = read(relative)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()  // after the last "\n": empty, or a torn line a reader must not take
        return lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    func names(_ relative: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: url(relative).path)) ?? []).sorted()
    }
}

/// The result of running the binary.
struct Run {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// The folder of the test bundle, where the package's products are built.
let buildDirectory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()

/// The built `basket-sync`, beside the test bundle; or the one `BASKET_SYNC_TEST_BINARY` names
/// (CI tests the static binary the package ships, built with optimizations).
let binary: URL = {
    if let named = ProcessInfo.processInfo.environment["BASKET_SYNC_TEST_BINARY"], !named.isEmpty {
        return URL(fileURLWithPath: named)
    }
    return buildDirectory.appendingPathComponent("basket-sync")
}()

/// Starts `basket-sync` with arguments, its output and errors in pipes.
private func started(_ arguments: [String], environment: [String: String], in directory: String?, executable: String?) throws -> (Child, out: Pipe, err: Pipe) {
    let process = Child()
    process.executableURL = executable.map { URL(fileURLWithPath: $0) } ?? binary
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env.removeValue(forKey: "BASKET_SYNC_DIR")
    for (key, value) in environment { env[key] = value }
    process.environment = env
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    return (process, out, err)
}

/// Runs `basket-sync` with arguments to completion.
func basketSync(_ arguments: [String], environment: [String: String] = [:], in directory: String? = nil, executable: String? = nil) throws -> Run {
    let (process, out, err) = try started(arguments, environment: environment, in: directory, executable: executable)
    // Both pipes drained at once: a child that fills one while the other is read would wait for ever.
    let errors = Drained()
    let thread = Thread { errors.data = err.fileHandleForReading.readDataToEndOfFile(); errors.done.signal() }
    thread.start()
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    errors.done.wait()
    let stderr = errors.data
    process.waitUntilExit()
    return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
}

/// What a thread read from a pipe, handed over once `done` is signalled.
private final class Drained: @unchecked Sendable {
    var data = Data()
    let done = DispatchSemaphore(value: 0)
}

/// The arguments that run `basket-sync` as `user` (through `setpriv`), or as the test runs.
func asUser(_ user: UInt32?, _ arguments: [String]) -> (executable: String?, arguments: [String]) {
    guard let user else { return (nil, arguments) }
    return ("/usr/bin/setpriv", ["--reuid=\(user)", "--regid=\(user)", "--clear-groups", "--", binary.path] + arguments)
}

/// Runs `basket-sync` (as `user` when given), killing it after `seconds`: nil when it had to be
/// killed (a hang). Its output must fit the pipes (a few KiB), as an error message or a status does.
func basketSync(_ arguments: [String], killAfter seconds: Double, user: UInt32? = nil) throws -> Run? {
    let command = asUser(user, arguments)
    let (process, out, err) = try started(command.arguments, environment: [:], in: nil, executable: command.executable)
    // On the monotonic clock: a test that steps the wall clock moves no deadline.
    let deadline = ContinuousClock.now + .seconds(seconds)
    while process.isRunning, ContinuousClock.now < deadline { usleep(2_000) }
    if process.isRunning {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return nil
    }
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    let stderr = err.fileHandleForReading.readDataToEndOfFile()
    return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
}

/// A running `basket-sync watch`, its stderr collected in a file.
final class AgentProcess {
    let process = Child()
    let logURL: URL

    /// `descriptors`: the agent runs with that limit of open files (`prlimit --nofile`).
    init(directory: String, arguments: [String] = [], environment: [String: String] = [:], user: UInt32? = nil, descriptors: Int? = nil) throws {
        logURL = URL(fileURLWithPath: directory).appendingPathComponent("../agent-\(UUID().uuidString).log").standardized
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let command = asUser(user, ["-C", directory, "watch"] + arguments)
        let executable = command.executable ?? binary.path
        if let descriptors {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments = ["--nofile=\(descriptors):\(descriptors)", "--", executable] + command.arguments
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = command.arguments
        }
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: logURL)
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    var log: String { (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" }

    /// Waits until the agent says it watches (its watches are in place).
    func waitUntilWatching() async throws {
        try await eventually("the agent starts watching") { self.log.contains("watching ") || !self.process.isRunning }
        #expect(process.isRunning, "the agent stopped: \(log)")
    }

    func stop(_ signal: Int32 = SIGTERM) -> Int32 {
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
        try? FileManager.default.removeItem(at: logURL)
    }
}

/// Whether the agents the tests start poll (the watch suite run again with
/// `BASKET_SYNC_WATCH_MODE=poll…`, docs/spec.md §10) instead of using inotify.
let agentsPoll = ProcessInfo.processInfo.environment["BASKET_SYNC_WATCH_MODE"]?.hasPrefix("poll") == true

struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting until \(what)" }
}

/// Waits for a condition with a generous deadline; the outcome never depends on timing.
func eventually(_ what: String, timeout: Double = 30, _ condition: () throws -> Bool) async throws {
    // On the monotonic clock: a step of the wall clock (a test's, an operator's) moves no deadline.
    let deadline = ContinuousClock.now + .seconds(timeout)
    while ContinuousClock.now < deadline {
        if try condition() { return }
        try await Task.sleep(nanoseconds: 5_000_000)
    }
    if try condition() { return }
    throw TimedOut(what: what)
}

/// The products of a record as a dictionary.
func products(_ record: [String: Any]) -> [String: Int] { products(record, key: "products") }

/// A record's list of products under `key` (`products`, `mealzProducts`) as a dictionary.
func products(_ record: [String: Any], key: String) -> [String: Int] {
    var result: [String: Int] = [:]
    for line in record[key] as? [[String: Any]] ?? [] {
        result[line["id"] as! String] = line["quantity"] as? Int
    }
    return result
}

func cartJSON(_ lines: [(String, Int)], syncedThrough: Int? = nil) -> String {
    let products = lines.map { "{\"id\":\"\($0.0)\",\"quantity\":\($0.1)}" }.joined(separator: ",")
    return "{\"products\":[\(products)]\(syncedThrough.map { ",\"syncedThrough\":\($0)" } ?? "")}\n"
}

/// Kills a process and every process it started, children first (a host that runs
/// `basket-sync wait` leaves it blocked when only the host is killed).
func killTree(_ pid: Int32) {
    kill(pid, SIGSTOP)
    for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
        guard let child = Int32(entry),
              let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        if fields.count > 1, Int32(fields[1]) == pid { killTree(child) }
    }
    kill(pid, SIGKILL)
}

/// Starts `basket-sync` in the background, stdin from /dev/null, its output and errors appended
/// to the files given (created when missing), or to /dev/null.
func startedInBackground(_ arguments: [String], output: String? = nil, errors: String? = nil, environment: [String: String] = [:]) throws -> Child {
    func sink(_ path: String?) throws -> FileHandle {
        guard let path else { return try FileHandle(forWritingTo: URL(fileURLWithPath: "/dev/null")) }
        if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
        return try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    }
    let child = Child()
    child.executableURL = binary
    child.arguments = arguments
    child.standardOutput = try sink(output)
    child.standardError = try sink(errors)
    child.standardInput = FileHandle.nullDevice
    if !environment.isEmpty { child.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
    try child.run()
    return child
}

/// Whether the process sleeps in the kernel in a `poll` (an agent or a `wait` waiting for events).
func sleepsInPoll(_ child: Child) -> Bool {
    ((try? String(contentsOfFile: "/proc/\(child.processIdentifier)/wchan", encoding: .utf8)) ?? "").contains("poll")
}

/// Runs mount(8) or umount(8); whether it succeeded (the tests that mount need root, as CI has).
@discardableResult
func mountCommand(_ arguments: [String], program: String = "/bin/mount") -> Bool {
    guard let process = try? Child.run(URL(fileURLWithPath: program), arguments: arguments) else { return false }
    process.waitUntilExit()
    return process.terminationStatus == 0
}
