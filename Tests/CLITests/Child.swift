import Foundation

/// A child process started with `posix_spawn`, with the part of `Process`'s interface the tests
/// use. Foundation's `Child.run()` on Linux crashes now and then (Swift 6.3.1: it over-reads the
/// entries of /proc/self/fd, swift-corelibs-foundation#5472); the file-shape matrix, which starts
/// thousands of processes side by side, met it. The child gets a clean signal mask, its standard
/// streams as given, and no other descriptor of the test process.
final class Child: @unchecked Sendable {
    var executableURL: URL?
    var arguments: [String] = []
    var environment: [String: String]?
    var currentDirectoryURL: URL?
    /// A `FileHandle` or a `Pipe` (its reading end for input, its writing end for output); nil
    /// inherits the test process's.
    var standardInput: Any?
    var standardOutput: Any?
    var standardError: Any?
    private(set) var processIdentifier: Int32 = 0
    private var waitStatus: Int32?
    private let lock = NSLock()

    /// Starts `url` with `arguments`.
    static func run(_ url: URL, arguments: [String]) throws -> Child {
        let child = Child()
        child.executableURL = url
        child.arguments = arguments
        try child.run()
        return child
    }

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    // glibc ≥ 2.34 has both; the Glibc module does not show them.
    private static let closeFrom = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: CloseFrom.self) }
    private static let changeDirectory = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addchdir_np").map { unsafeBitCast($0, to: ChangeDirectory.self) }

    func run() throws {
        guard let executableURL else { throw CocoaError(.fileNoSuchFile) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        func descriptor(_ stream: Any?, output: Bool) -> Int32? {
            switch stream {
            case let handle as FileHandle: return handle.fileDescriptor
            case let pipe as Pipe: return output ? pipe.fileHandleForWriting.fileDescriptor : pipe.fileHandleForReading.fileDescriptor
            default: return nil
            }
        }
        for (target, stream, output) in [(Int32(0), standardInput, false), (1, standardOutput, true), (2, standardError, true)] {
            if let fd = descriptor(stream, output: output) { posix_spawn_file_actions_adddup2(&actions, fd, target) }
        }
        guard let closeFrom = Self.closeFrom, let changeDirectory = Self.changeDirectory else { throw CocoaError(.featureUnsupported) }
        _ = closeFrom(&actions, 3)
        if let currentDirectoryURL { _ = changeDirectory(&actions, currentDirectoryURL.path) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = [executableURL.path] + arguments
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var cArguments: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        var cEnvironment: [UnsafeMutablePointer<CChar>?] = env.map { strdup($0) } + [nil]
        defer {
            for pointer in cArguments { free(pointer) }
            for pointer in cEnvironment { free(pointer) }
        }
        var pid = pid_t()
        let result = posix_spawn(&pid, executableURL.path, &actions, &attributes, &cArguments, &cEnvironment)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        processIdentifier = pid
        // The child has its ends of the pipes: the parent closes them, so that EOF comes.
        if let pipe = standardOutput as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardError as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
    }

    /// Reaps the child if it ended (without waiting, unless `block`).
    private func reap(block: Bool) -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let waitStatus { return waitStatus }
        var status: Int32 = 0
        while true {
            let result = waitpid(processIdentifier, &status, block ? 0 : WNOHANG)
            if result == processIdentifier { waitStatus = status; return status }
            if result == -1, errno == EINTR { continue }
            return nil
        }
    }

    var isRunning: Bool { processIdentifier != 0 && reap(block: false) == nil }

    func waitUntilExit() { _ = reap(block: true) }

    /// The exit code, or the signal that ended it.
    var terminationStatus: Int32 {
        guard let status = reap(block: false) else { return 0 }
        return status & 0x7F == 0 ? (status >> 8) & 0xFF : status & 0x7F
    }

    var terminationReason: Process.TerminationReason {
        guard let status = reap(block: false) else { return .exit }
        return status & 0x7F == 0 ? .exit : .uncaughtSignal
    }
}
