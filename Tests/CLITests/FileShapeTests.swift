import Foundation
import Synchronization
import Testing
import TestSupport

/// Whoever writes the sync directory can make basket-sync refuse work, never read, write, truncate
/// or change the mode of a file outside it, nor hang it (docs/spec.md §7). A matrix: each path
/// basket-sync reads or writes × each shape a writer of the directory can give it × each command.
@Suite struct FileShapeTests {
    /// A file outside the sync directory that nothing may touch.
    struct Canary {
        let path: String
        let bytes: Data
        let attributes: [FileAttributeKey: Any]

        /// Whether the canary is alone in its directory (then nothing may appear there either).
        let alone: Bool

        init(in directory: String, alone: Bool = false) throws {
            self.alone = alone
            path = directory + "/canary.json"
            bytes = Data(#"{"products":[{"id":"secret-s3cr3t","quantity":1}],"syncedThrough":0}"#.utf8)
            try bytes.write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            attributes = try FileManager.default.attributesOfItem(atPath: path)
        }

        /// Why the canary is not as it was, if it is not.
        func damage() -> String? {
            if alone {
                let around = (try? FileManager.default.contentsOfDirectory(atPath: (path as NSString).deletingLastPathComponent)) ?? []
                if around != ["canary.json"] { return "the canary's directory changed: \(around)" }
            }
            guard let now = try? FileManager.default.attributesOfItem(atPath: path) else { return "the canary is gone" }
            if FileManager.default.contents(atPath: path) != bytes { return "the canary's bytes changed" }
            if (now[.posixPermissions] as? Int) != (attributes[.posixPermissions] as? Int) { return "the canary's mode changed" }
            if (now[.modificationDate] as? Date) != (attributes[.modificationDate] as? Date) { return "the canary's mtime changed" }
            return nil
        }
    }

    enum Shape: String, CaseIterable {
        case regular = "as it is"
        case linkInside = "a symbolic link to a file inside"
        case linkOutside = "a symbolic link to a file outside"
        case linkOutsideDirectory = "a symbolic link to the directory outside that holds the canary"
        case danglingLink = "a dangling symbolic link"
        case fifo = "a FIFO"
        case directory = "a directory"
        case deviceLink = "a symbolic link to /dev/zero"
        case socket = "a socket"
        case noPermission = "without permission (mode 000, root's; basket-sync runs as nobody)"
        case sparse = "a sparse file (a 1 GiB hole after what it holds)"
        case readerLocked = "locked by a reader (flock, held while the command runs)"
        case anotherAccount = "another account's (uid 4212, group-writable)"

        /// The user the commands run as with this shape (nil: as the test runs, root here).
        var user: UInt32? { self == .noPermission ? 65534 : nil }

        /// Gives `path` this shape; returns the descriptors a reader holds locked while the case
        /// runs (``readerLocked``), for the caller to close after it.
        @discardableResult
        func make(at path: String, inside directory: String, canary: Canary) throws -> [Int32] {
            if self == .regular { return [] }
            switch self {
            case .sparse:
                // A file of what it held (a directory's place taken by one), then a hole.
                var info = stat()
                if lstat(path, &info) != 0 || info.st_mode & S_IFMT != S_IFREG {
                    try? FileManager.default.removeItem(atPath: path)
                    _ = FileManager.default.createFile(atPath: path, contents: Data("{}\n".utf8))
                }
                lstat(path, &info)
                guard truncate(path, info.st_size + (1 << 30)) == 0 else { throw CocoaError(.fileWriteUnknown) }
                return []
            case .readerLocked:
                // Read access is all a reader needs to lock a file (or a folder) for good.
                let fd = open(path, O_RDONLY | O_NONBLOCK)
                guard fd >= 0 else { return [] }
                _ = flock(fd, LOCK_EX)
                return [fd]
            case .anotherAccount:
                guard lchown(path, 4212, 4212) == 0 || !FileManager.default.fileExists(atPath: path) else { throw CocoaError(.fileWriteUnknown) }
                var info = stat()
                if lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFLNK { chmod(path, (info.st_mode & 0o7777) | 0o020) }
                return []
            default:
                break
            }
            if self == .noPermission {
                // Nobody owns the directory; the path is root's and closed (created when missing).
                let owner = try Child.run(URL(fileURLWithPath: "/bin/chown"), arguments: ["-R", "65534:65534", directory])
                owner.waitUntilExit()
                if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: Data("{}".utf8)) }
                chown(path, 0, 0)
                chmod(path, 0)
                return []
            }
            try? FileManager.default.removeItem(atPath: path)
            switch self {
            case .regular, .noPermission, .sparse, .readerLocked, .anotherAccount: break
            case .linkInside:
                let target = directory + "/inside-target.json"
                try Data(#"{"products":[]}"#.utf8).write(to: URL(fileURLWithPath: target))
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
            case .linkOutside: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: canary.path)
            case .linkOutsideDirectory:
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: (canary.path as NSString).deletingLastPathComponent)
            case .danglingLink: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/nonexistent/basket-sync")
            case .fifo: guard mkfifo(path, 0o644) == 0 else { throw CocoaError(.fileWriteUnknown) }
            case .directory: try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            case .deviceLink: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
            case .socket: try bindSocket(at: path)
            }
            return []
        }

        private func bindSocket(at path: String) throws {
            let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw CocoaError(.fileWriteUnknown) }
            defer { close(fd) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw CocoaError(.fileWriteInvalidFileName) }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in bytes.enumerated() { raw[index] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard bound == 0 else { throw CocoaError(.fileWriteUnknown) }
        }
    }

    /// Every path basket-sync reads or writes. Before each run the directory holds a cart, one
    /// record of each kind, and three deliveries waiting: a valid one (`e2`, moved to `cur/e2`), a
    /// malformed one (`zz-bad`, set aside as `bad/zz-bad` with `bad/zz-bad.error`) and the entry
    /// `evt-shape`. The agent is also given one more delivery (`e3`) while it runs.
    static let paths = [
        "cart.json", "outbox.jsonl", "notifications.jsonl", "payments.jsonl", "basket-sync.json",
        "inbox/new/evt-shape", "inbox/new", "inbox/cur", "inbox/bad", "inbox/tmp",
        "inbox/cur/e2", "inbox/bad/zz-bad", "inbox/bad/zz-bad.error",
        ".basket-sync", ".basket-sync/state.db", ".basket-sync/state.db-wal", ".basket-sync/state.db-shm", ".basket-sync/committed",
    ]
    /// Every command that touches the directory; `watch` is the agent.
    static let commands: [[String]] = [
        ["sync"], ["apply"], ["status"], ["status", "--json"], ["push", "--id", "p1", "B=+1"], ["set-store", "s1", "--mode", "retailer"],
        ["payment-started", "--total", "1.00"], ["handle-payment", "--total", "1.00", "--order-id", "o1"],
        ["validate", "cart.json"], ["init"], ["watch"],
    ]
    /// The exit codes docs/spec.md §5 documents.
    static let documentedCodes: Set<Int32> = [0, 64, 65, 66, 73, 74, 75, 78]

    /// The directory every case starts from: made once per path, copied per case.
    static func template(in playground: Playground) throws -> String {
        let dir = playground.path + "/template"
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        #expect(try basketSync(["-C", dir, "set-store", "s0", "--mode", "retailer"]).status == 0)
        #expect(try basketSync(["-C", dir, "push", "--id", "e1", "A=+1"]).status == 0)
        try Data(cartJSON([("A", 1)], syncedThrough: 1).utf8).write(to: URL(fileURLWithPath: dir + "/cart.json"))
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(try basketSync(["-C", dir, "payment-started", "--total", "1.00"]).status == 0)
        #expect(try basketSync(["-C", dir, "push", "--id", "e2", "A=+1"]).status == 0)
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: dir + "/inbox/new/zz-bad"))
        try Data(#"{"id":"evt-shape","type":"basketDelta","products":[{"id":"C","quantity":1}]}"#.utf8).write(to: URL(fileURLWithPath: dir + "/inbox/new/evt-shape"))
        return dir
    }

    @Test(arguments: paths)
    func noShapeOfAPathMakesACommandHangOrTouchAFileOutside(path: String) async throws {
        let playground = try Playground()
        let template = try Self.template(in: playground)
        // The canary's directory is open to all: with nobody running, only the file's own mode guards it.
        chmod(playground.path, 0o755)
        var tried = 0
        for shape in Shape.allCases {
            for command in Self.commands {
                let outside = try Playground()
                chmod(outside.path, 0o755)
                let canary = try Canary(in: outside.path, alone: true)
                let dir = playground.path + "/case"
                try? FileManager.default.removeItem(atPath: dir)
                try FileManager.default.copyItem(atPath: template, toPath: dir)
                let held = try shape.make(at: dir + "/" + path, inside: dir, canary: canary)
                defer { for fd in held { close(fd) } }
                let context = "\(path) as \(shape.rawValue), \(command.joined(separator: " "))"
                let bounded = command == ["watch"]
                    ? try runAgent(in: dir, user: shape.user)
                    : try basketSync(["-C", dir] + command, killAfter: 20, user: shape.user)
                guard let run = bounded else {
                    Issue.record("\(context): still running after 20 s (a hang)")
                    continue
                }
                tried += 1
                #expect(Self.documentedCodes.contains(run.status), "\(context): exit \(run.status): \(run.stderr)")
                #expect(canary.damage() == nil, "\(context): \(canary.damage() ?? "")")
                #expect(!run.stdout.contains("s3cr3t") && !run.stderr.contains("s3cr3t"), "\(context): the outside file's content leaked")
                for error in ["inbox/bad/zz-bad.error", "inbox/bad/evt-shape.error"] {
                    // Read as a file basket-sync wrote, never through a link the case planted.
                    var info = stat()
                    guard lstat(dir + "/" + error, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
                    #expect(!Self.dataRegions(of: dir + "/" + error).contains("s3cr3t"), "\(context): the outside file's content leaked into \(error)")
                }
                if run.status != 0, !run.stderr.isEmpty {
                    #expect(run.stderr.hasPrefix("basket-sync: "), "\(context): \(run.stderr)")
                }
                if shape == .regular, command != ["init"] {
                    #expect(run.status == 0, "\(context): the untouched directory works: exit \(run.status): \(run.stderr)")
                }
            }
        }
        #expect(tried == Shape.allCases.count * Self.commands.count)
    }

    /// The bytes of a file's data regions, its holes left out (zeros, which hold no secret): a
    /// sparse file of a gigabyte is read in what it holds, not in a gigabyte.
    static func dataRegions(of path: String) -> String {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        // lseek's SEEK_DATA and SEEK_HOLE (Linux), which Glibc's module does not name.
        let (seekData, seekHole): (Int32, Int32) = (3, 4)
        var bytes: [UInt8] = []
        var offset: off_t = 0
        while true {
            let start = lseek(fd, offset, seekData)
            guard start >= 0 else { break }
            let end = lseek(fd, start, seekHole)
            guard end > start else { break }
            var chunk = [UInt8](repeating: 0, count: Int(end - start))
            let read = chunk.withUnsafeMutableBytes { raw in pread(fd, raw.baseAddress, raw.count, start) }
            guard read > 0 else { break }
            bytes += chunk.prefix(Int(read))
            offset = end
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The agent on a shaped directory: it starts (or refuses, with its exit code), is given one
    /// more delivery, and stops on SIGTERM — each step bounded. nil when it did not stop (a hang).
    func runAgent(in dir: String, user: UInt32?) throws -> Run? {
        let logPath = dir + "/../agent.log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let command = asUser(user, ["-C", dir, "watch"])
        let process = Child()
        process.executableURL = URL(fileURLWithPath: command.executable ?? binary.path)
        process.arguments = command.arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardInput = FileHandle.nullDevice
        try process.run()
        func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
        func waitFor(_ seconds: Double, _ condition: () -> Bool) {
            let deadline = Date().addingTimeInterval(seconds)
            while !condition(), Date() < deadline { usleep(5_000) }
        }
        waitFor(20) { !process.isRunning || log().contains("watching ") }
        if process.isRunning {
            let event = #"{"id":"e3","type":"basketDelta","products":[{"id":"D","quantity":1}]}"#
            // Delivered the Maildir way, by the test, only into real folders (not through a planted link).
            func isDirectory(_ path: String) -> Bool { var info = stat(); return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR }
            if isDirectory(dir + "/inbox/tmp"), isDirectory(dir + "/inbox/new"),
               (try? Data(event.utf8).write(to: URL(fileURLWithPath: dir + "/inbox/tmp/e3"))) != nil {
                rename(dir + "/inbox/tmp/e3", dir + "/inbox/new/e3")
            }
            // Taken, or refused with an error: either way the agent has looked at it.
            waitFor(10) { !process.isRunning || FileManager.default.fileExists(atPath: dir + "/inbox/cur/e3") || log().contains("error:") }
            kill(process.processIdentifier, SIGTERM)
            waitFor(20) { !process.isRunning }
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        process.waitUntilExit()
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return Run(status: status, stdout: "", stderr: log())
    }

    /// An inbox folder that is a link to a directory elsewhere is refused, never followed: no file
    /// there is read, moved or written (the outside directory holds a valid event and a secret).
    /// `status` says the inbox is unusable instead of "0 waiting".
    @Test(arguments: ["new", "cur", "tmp", "bad"])
    func anInboxFolderThatIsALinkIsRefusedNotFollowed(folder: String) throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        let outside = playground.path + "/outside"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try playground.write("outside/evt", #"{"id":"outside","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#)
        try playground.write("outside/id_rsa", "SECRET")
        try playground.write("sync/inbox/new/zz-bad", "{not json")
        _ = try basketSync(["-C", dir, "push", "--id", "inside", "B=+1"])
        try FileManager.default.removeItem(atPath: dir + "/inbox/" + folder)
        try FileManager.default.createSymbolicLink(atPath: dir + "/inbox/" + folder, withDestinationPath: outside)
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 73, "\(sync.stderr)")
        #expect(sync.stderr.contains("inbox/\(folder): is a symbolic link, not a directory"), "\(sync.stderr)")
        let push = try basketSync(["-C", dir, "push", "--id", "later", "C=+1"])
        #expect(push.status == 73, "\(push.stderr)")
        #expect(playground.names("outside") == ["evt", "id_rsa"], "nothing moved out of or into the outside directory")
        #expect(playground.read("outside/id_rsa") == "SECRET")
        #expect(!playground.read("sync/outbox.jsonl").contains("outside"), "the outside event was not taken")
        let status = try basketSync(["-C", dir, "status"])
        #expect(status.stdout.contains("inbox unusable: ") && status.stdout.contains("not a directory"), "\(status.stdout)")
    }

    /// A cart path whose folder is a link to a directory outside (`"cart": "host/cart.json"`,
    /// `host` → outside): without `followSymlinks` the cart is rejected, never read nor written.
    @Test func aCartPathThroughALinkedFolderIsRejected() throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        let outside = playground.path + "/outside"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try playground.write("outside/cart.json", #"{"products":[{"id":"secret-s3cr3t","quantity":7}],"syncedThrough":0}"#)
        let before = try FileManager.default.attributesOfItem(atPath: outside + "/cart.json")
        try playground.write("sync/basket-sync.json", #"{"cart": "host/cart.json"}"#)
        try FileManager.default.createSymbolicLink(atPath: dir + "/host", withDestinationPath: outside)
        _ = try basketSync(["-C", dir, "push", "A=+2"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 65, "\(sync.stderr)")
        #expect(sync.stderr.contains("the way to the cart passes through a symbolic link"), "\(sync.stderr)")
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 65, "\(apply.stderr)")
        #expect(playground.read("outside/cart.json").contains("secret-s3cr3t") && !playground.read("outside/cart.json").contains("\"A\""), "the outside cart is not written")
        let after = try FileManager.default.attributesOfItem(atPath: outside + "/cart.json")
        #expect(after[.systemFileNumber] as? Int == before[.systemFileNumber] as? Int, "not replaced")
        #expect(playground.records("sync/notifications.jsonl").isEmpty, "nothing notified from the outside cart")
        #expect(!sync.stderr.contains("s3cr3t") && !apply.stderr.contains("s3cr3t"))
    }

    /// Runs `body` while another thread swaps two names as fast as it can (`renameat2` with
    /// `RENAME_EXCHANGE`: each name is always there, as one or the other).
    static func swapping(_ first: String, with second: String, while body: () throws -> Void) throws {
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        let symbol = try #require(dlsym(dlopen(nil, RTLD_NOW), "renameat2"), "glibc has renameat2")
        let renameat2 = unsafeBitCast(symbol, to: RenameAt2.self)
        let stop = Mutex(false)
        let swapper = Thread {
            while !stop.withLock({ $0 }) { _ = renameat2(AT_FDCWD, first, AT_FDCWD, second, 2) }
        }
        swapper.start()
        defer {
            stop.withLock { $0 = true }
            while swapper.isExecuting { usleep(1_000) }
        }
        try body()
    }

    /// The race: while `sync` and `apply` run, a thread swaps the cart's folder with a link to a
    /// folder outside and back (`renameat2(RENAME_EXCHANGE)`, thousands of times). The outside
    /// cart is never written, nothing from it is ever notified, nothing is left in it.
    @Test func aCartFolderSwappedForALinkMidwayIsNeverFollowed() throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        let outside = playground.path + "/outside"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try playground.write("outside/cart.json", #"{"products":[{"id":"outside-only","quantity":5}],"syncedThrough":0}"#)
        let outsideBefore = playground.read("outside/cart.json")
        try playground.write("sync/basket-sync.json", #"{"cart": "host/cart.json"}"#)
        try FileManager.default.createDirectory(atPath: dir + "/host", withIntermediateDirectories: false)
        try playground.write("sync/host/cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        try FileManager.default.createSymbolicLink(atPath: dir + "/host-link", withDestinationPath: outside)
        try Self.swapping(dir + "/host", with: dir + "/host-link") {
            for round in 1...40 {
                _ = try basketSync(["-C", dir, "push", "--id", "e\(round)", "A=+1"])
                _ = try basketSync(["-C", dir, "sync"])
                _ = try basketSync(["-C", dir, "apply"])
            }
        }
        // Wherever the swap stopped, the outside folder is as it was.
        let outsideNow = (try? String(contentsOfFile: outside + "/cart.json", encoding: .utf8)) ?? ""
        #expect(outsideNow == outsideBefore, "the outside cart was written: \(outsideNow)")
        #expect(playground.names("outside") == ["cart.json"], "nothing left outside: \(playground.names("outside"))")
        #expect(!playground.read("sync/notifications.jsonl").contains("outside-only"), "a notification came from the outside cart")
    }

    /// The race on a tree's cart: its owner (the host, a member of the root's group) swaps the
    /// cart's folder with a link to a folder outside and back while every command that touches
    /// a cart runs on it, and an agent serves the tree. Whatever the interleaving, nothing is
    /// ever made, written or read outside: each command reaches the cart's files through the
    /// folder opened once without following a link.
    @Test func aTreeCartFolderSwappedForALinkMidwayIsNeverFollowed() async throws {
        let playground = try Playground()
        let root = playground.path + "/tree"
        let outside = playground.path + "/outside"
        #expect(try basketSync(["-C", root, "init", "--tree"]).status == 0)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try playground.write("outside/cart.json", #"{"products":[{"id":"outside-only","quantity":5}],"syncedThrough":0}"#)
        let outsideBefore = playground.read("outside/cart.json")
        let cart = root + "/c1"
        #expect(try basketSync(["-C", cart, "push", "--id", "e0", "A=+1"]).status == 0)
        try playground.write("tree/c1/cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        try FileManager.default.createSymbolicLink(atPath: root + "/c1-link", withDestinationPath: outside)
        let agent = try AgentProcess(directory: root)
        try await agent.waitUntilWatching()
        try Self.swapping(cart, with: root + "/c1-link") {
            for round in 1...12 {
                _ = try basketSync(["-C", cart, "push", "--id", "e\(round)", "A=+1"])
                _ = try basketSync(["-C", root, "sync"])
                _ = try basketSync(["-C", cart, "sync"])
                _ = try basketSync(["-C", cart, "apply"])
                _ = try basketSync(["-C", cart, "status"])
                _ = try basketSync(["-C", cart, "lock", "--", "/bin/true"])
                _ = try basketSync(["-C", cart, "init"])
            }
        }
        #expect(agent.stop() == 0, "\(agent.log)")
        // Wherever the swap stopped, the outside folder is as it was.
        #expect(playground.names("outside") == ["cart.json"], "made outside: \(playground.names("outside"))")
        #expect(playground.read("outside/cart.json") == outsideBefore, "the outside cart was written")
        #expect(!agent.log.contains("/proc/self/fd"), "paths named as people know them: \(agent.log)")
    }

    /// `-C ROOT/ID` enters the cart's folder opened without following a link: the folder swapped
    /// for a link to a folder outside in the instant between the command's check and its entry
    /// (held there by the LD_PRELOAD seam) is never entered, and a file the command line names
    /// relative to the cart (`validate cart.json`) is read in the folder checked, not outside.
    @Test func aTreeCartFolderSwappedBeforeItIsEnteredIsNeverEntered() throws {
        let playground = try Playground()
        let root = playground.path + "/tree"
        #expect(try basketSync(["-C", root, "init", "--tree"]).status == 0)
        try FileManager.default.createDirectory(atPath: playground.path + "/outside", withIntermediateDirectories: false)
        try playground.write("outside/cart.json", #"{"products":"outside only"}"#)
        #expect(try basketSync(["-C", root + "/c1", "push", "--id", "e0", "A=+1"]).status == 0)
        try playground.write("tree/c1/cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        let go = playground.path + "/go"
        let output = playground.path + "/validate.out"
        let process = try startedInBackground(["-C", root + "/c1", "validate", "cart.json"], output: output, errors: output,
                                              environment: ["LD_PRELOAD": FaultTests.shim, "FAULTSHIM_HOLD_CHDIR": "1", "FAULTSHIM_GO": go])
        let deadline = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: go + ".held"), process.isRunning, ContinuousClock.now < deadline { usleep(2_000) }
        #expect(FileManager.default.fileExists(atPath: go + ".held"), "validate reached its chdir")
        try FileManager.default.moveItem(atPath: root + "/c1", toPath: root + "/c1.real")
        try FileManager.default.createSymbolicLink(atPath: root + "/c1", withDestinationPath: playground.path + "/outside")
        #expect(FileManager.default.createFile(atPath: go, contents: nil))
        process.waitUntilExit()
        let said = playground.read("validate.out")
        #expect(process.terminationStatus == 0 && !said.contains("outside") && !said.contains("products"), "read through the link swapped in: \(process.terminationStatus) \(said)")
    }

    /// The same race on each inbox folder: while `push` and `sync` run, the folder is swapped with
    /// a link to a folder outside and back. Nothing is ever moved, written or read there.
    @Test(arguments: ["new", "cur", "bad", "tmp"])
    func anInboxFolderSwappedForALinkMidwayIsNeverFollowed(folder: String) throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        let outside = playground.path + "/outside"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try playground.write("outside/evt", #"{"id":"outside-only","type":"basketDelta","products":[{"id":"Z","quantity":1}]}"#)
        try FileManager.default.createDirectory(atPath: dir + "/inbox/bad", withIntermediateDirectories: true)
        for index in 0..<40 { try playground.write("sync/inbox/new/bad-\(index)", "{not json") }
        try FileManager.default.createSymbolicLink(atPath: dir + "/inbox/\(folder)-link", withDestinationPath: outside)
        try Self.swapping(dir + "/inbox/\(folder)", with: dir + "/inbox/\(folder)-link") {
            for round in 1...40 {
                _ = try basketSync(["-C", dir, "push", "--id", "e\(round)", "A=+1"])
                _ = try basketSync(["-C", dir, "sync"])
            }
        }
        #expect(playground.names("outside") == ["evt"], "\(folder): files appeared outside: \(playground.names("outside"))")
        #expect(!playground.read("sync/outbox.jsonl").contains("outside-only"), "\(folder): an event outside was taken")
    }

    /// A JSON Lines file that is a hard link (another name may be outside) is refused, not appended to.
    @Test func aProjectionWithAnotherNameIsRefusedNotAppendedTo() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try? FileManager.default.removeItem(atPath: dir + "/outbox.jsonl")
        try FileManager.default.linkItem(atPath: canary.path, toPath: dir + "/outbox.jsonl")
        _ = try basketSync(["-C", dir, "push", "A=+1"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 73)
        #expect(sync.stderr.contains("outbox.jsonl: has 2 hard links"), "\(sync.stderr)")
        #expect(canary.damage() == nil)
    }

    /// A JSON Lines file replaced by a link to a file outside is refused, never cut or appended to.
    @Test func aProjectionThatIsALinkIsRefusedNotWrittenThrough() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createSymbolicLink(atPath: dir + "/outbox.jsonl", withDestinationPath: canary.path)
        _ = try basketSync(["-C", dir, "push", "A=+1"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 73)
        #expect(sync.stderr.contains("outbox.jsonl: is a symbolic link, not a regular file"), "\(sync.stderr)")
        #expect(canary.damage() == nil)
    }

    /// `followSymlinks: true` and a cart that is a link: `apply` writes the target, atomically,
    /// keeping its mode; the link stays a link.
    @Test func applyWritesTheTargetOfAFollowedCartKeepingItsMode() throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        try playground.write("basket-sync.json", #"{"followSymlinks": true}"#)
        try playground.write("real-cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        chmod(dir + "/real-cart.json", 0o600)
        try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: "real-cart.json")
        _ = try basketSync(["-C", dir, "push", "A=+2"])
        _ = try basketSync(["-C", dir, "sync"])
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 0, "\(apply.stderr)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/cart.json")) == "real-cart.json", "the link stays a link")
        #expect(playground.read("real-cart.json").contains("\"A\""))
        let mode = (try FileManager.default.attributesOfItem(atPath: dir + "/real-cart.json"))[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// `followSymlinks: true` follows a link only to what its own owner owns: another account's
    /// link (here `nobody`'s, as a member of the directory's group would plant) to root's private
    /// file, or to a folder of root's on the way, is refused — the file never read, `apply` never
    /// writing it; the same file linked by its owner is followed.
    @Test(arguments: ["cart", "folder"]) func aLinkIsFollowedOnlyToWhatItsOwnerOwns(link: String) throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        let settings = link == "cart" ? #"{"followSymlinks": true}"# : #"{"followSymlinks": true, "cart": "host/cart.json"}"#
        try playground.write("sync/basket-sync.json", settings)
        try FileManager.default.createDirectory(atPath: playground.path + "/private", withIntermediateDirectories: false)
        chmod(playground.path + "/private", 0o700)
        let secret = cartJSON([("X", 1)], syncedThrough: 0)
        try playground.write("private/cart.json", secret)
        chmod(playground.path + "/private/cart.json", 0o600)
        let (linkPath, target) = link == "cart" ? (dir + "/cart.json", playground.path + "/private/cart.json") : (dir + "/host", playground.path + "/private")
        try FileManager.default.createSymbolicLink(atPath: linkPath, withDestinationPath: target)
        #expect(lchown(linkPath, 65534, 65534) == 0)
        _ = try basketSync(["-C", dir, "push", "A=+2"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.stderr.contains("a link is followed only to what its own owner owns"), "\(link): \(sync.stderr)")
        #expect(playground.records("sync/notifications.jsonl").isEmpty, "\(link): the file was read")
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 65 && apply.stderr.contains("uid 65534"), "\(link): \(apply)")
        #expect(playground.read("private/cart.json") == secret, "\(link): written through another account's link")
        // Its owner's link to it is followed.
        #expect(lchown(linkPath, 0, 0) == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(playground.records("sync/notifications.jsonl").count == 1, "\(link): the owner's link is followed")
    }

    /// The owner check is made on what is read and written, not on names checked first: while
    /// another account swaps her own cart with her link to root's private file as fast as she can
    /// (`renameat2(RENAME_EXCHANGE)` in a loop), no `sync` reads the private file and no `apply`
    /// rewrites it; and her link to a folder of root's makes no cart there.
    @Test func aLinkSwappedInWhileTheCartIsReadIsNeverFollowedToAnotherAccountsFile() throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try playground.write("sync/basket-sync.json", #"{"followSymlinks": true}"#)
        try FileManager.default.createDirectory(atPath: playground.path + "/private", withIntermediateDirectories: false)
        chmod(playground.path + "/private", 0o700)
        let secret = cartJSON([("SECRET", 1)], syncedThrough: 0)
        try playground.write("private/cart.json", secret)
        chmod(playground.path + "/private/cart.json", 0o600)
        // Her link to a file to be made in root's folder: apply makes no cart there.
        try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: playground.path + "/private/new.json")
        #expect(lchown(dir + "/cart.json", 65534, 65534) == 0)
        _ = try basketSync(["-C", dir, "push", "A=+2"])
        _ = try basketSync(["-C", dir, "sync"])
        let made = try basketSync(["-C", dir, "apply"])
        #expect(made.status == 65 && made.stderr.contains("uid 65534"), "\(made)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/private/new.json"), "a cart made in root's folder")
        // Her own cart, and her link to root's file, swapped without end.
        #expect(unlink(dir + "/cart.json") == 0)
        try playground.write("sync/cart.alt", cartJSON([("A", 1)], syncedThrough: 0))
        #expect(chown(dir + "/cart.alt", 65534, 65534) == 0)
        try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: playground.path + "/private/cart.json")
        #expect(lchown(dir + "/cart.json", 65534, 65534) == 0)
        let stop = playground.path + "/stop"
        let swapper = Process()
        swapper.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        swapper.arguments = ["-c", """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            a, b, stop = (p.encode() for p in sys.argv[1:4])
            while not os.path.exists(stop):
                libc.renameat2(-100, a, -100, b, 2)
            """, dir + "/cart.json", dir + "/cart.alt", stop]
        try swapper.run()
        defer {
            _ = FileManager.default.createFile(atPath: stop, contents: nil)
            swapper.waitUntilExit()
        }
        for round in 0..<40 {
            _ = try basketSync(["-C", dir, "sync"])
            if round % 4 == 0 { _ = try basketSync(["-C", dir, "apply"]) }
            #expect(!playground.read("sync/notifications.jsonl").contains("SECRET"), "round \(round): the private file was read")
            #expect(playground.read("private/cart.json") == secret, "round \(round): the private file was written")
        }
        let attributes = try FileManager.default.attributesOfItem(atPath: playground.path + "/private/cart.json")
        #expect(attributes[.ownerAccountID] as? Int == 0 && attributes[.posixPermissions] as? Int == 0o600)
    }

    /// A cart `apply` makes through another account's link (the link leads to a file not made
    /// yet, in that account's folder) is that account's file: the host can read it, and the
    /// next read follows the link to it — the records applied stay in the host's hands.
    @Test func aCartMadeThroughALinkIsTheLinksOwners() throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try playground.write("sync/basket-sync.json", #"{"followSymlinks": true}"#)
        try FileManager.default.createDirectory(atPath: playground.path + "/host", withIntermediateDirectories: false)
        #expect(chown(playground.path + "/host", 65534, 65534) == 0)
        try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: playground.path + "/host/cart.json")
        #expect(lchown(dir + "/cart.json", 65534, 65534) == 0)
        _ = try basketSync(["-C", dir, "push", "A=+2"])
        _ = try basketSync(["-C", dir, "sync"])
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 0, "\(apply)")
        let made = try FileManager.default.attributesOfItem(atPath: playground.path + "/host/cart.json")
        #expect(made[.ownerAccountID] as? Int == 65534 && made[.groupOwnerAccountID] as? Int == 65534, "\(made)")
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 0 && !sync.stderr.contains("a link is followed only"), "\(sync)")
        #expect(playground.records("sync/notifications.jsonl").last.map(products) == ["A": 2])
    }

    /// The `.error` file of a quarantined event is made under a name nobody can guess: a link
    /// planted under a predictable name is never written through (nor one planted as its
    /// `.error`: renamed over, it is replaced, its target untouched).
    @Test func aPlantedLinkUnderTheOldTemporaryNameIsNeverWrittenThrough() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        for pid in 1...64 {
            try? FileManager.default.createSymbolicLink(atPath: dir + "/inbox/bad/.evil.error.\(pid).tmp", withDestinationPath: canary.path)
        }
        try FileManager.default.createSymbolicLink(atPath: dir + "/inbox/bad/evil.error", withDestinationPath: "/nonexistent")
        try "{not json".write(toFile: dir + "/inbox/new/evil", atomically: false, encoding: .utf8)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        // A `.error` alone is no entry's: the event goes beside it, the planted link replaced.
        let moved = playground.names("sync/inbox/bad").first { $0.hasPrefix("evil") && !$0.hasSuffix(".error") } ?? "none"
        #expect(moved == "evil", "\(playground.names("sync/inbox/bad"))")
        let error = try FileManager.default.attributesOfItem(atPath: dir + "/inbox/bad/\(moved).error")
        #expect(error[.type] as? FileAttributeType == .typeRegular, "a file of its own, no link followed")
        #expect(error[.posixPermissions] as? Int == 0o640, "a fixed mode, never one read from a link")
        #expect(canary.damage() == nil)
    }

    /// An event whose name is too long for its `.error`, or whose name `bad/` already holds as
    /// a directory, is set aside under another name; the events behind it are taken.
    @Test func anEventThatCannotBeSetAsideUnderItsNameNeverBlocksTheInbox() throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        let long = String(repeating: "x", count: 250)
        try "{not json".write(toFile: dir + "/inbox/new/0" + long, atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: dir + "/inbox/bad/1-taken/inside", withIntermediateDirectories: true)
        try "[]".write(toFile: dir + "/inbox/new/1-taken", atomically: false, encoding: .utf8)
        _ = try basketSync(["-C", dir, "push", "--id", "behind", "A=+1"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(playground.names("inbox/new").isEmpty)
        #expect(playground.records("outbox.jsonl").count == 1, "the event behind them is taken")
        #expect(playground.names("inbox/bad").filter { $0.hasSuffix(".error") }.count == 2)
        // A name is input: quoted at most 80 characters long.
        let errorFile = playground.names("inbox/bad").first { $0.hasPrefix("long-name.") && $0.hasSuffix(".error") } ?? "none"
        for text in [sync.stderr, playground.read("inbox/bad/" + errorFile)] {
            #expect(!text.contains(String(repeating: "x", count: 81)) && text.contains("…(a name of 251 bytes)"), "\(text)")
        }
    }

    /// A link or a FIFO delivered into `inbox/new/` is set aside unread; the events behind
    /// it are taken.
    @Test func aLinkOrAFIFOInTheInboxIsSetAsideUnread() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createSymbolicLink(atPath: dir + "/inbox/new/0-link", withDestinationPath: canary.path)
        #expect(mkfifo(dir + "/inbox/new/1-fifo", 0o644) == 0)
        _ = try basketSync(["-C", dir, "push", "--id", "after", "A=+1"])
        guard let sync = try basketSync(["-C", dir, "sync"], killAfter: 20) else {
            Issue.record("sync hung on a FIFO in the inbox")
            return
        }
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(Set(playground.names("sync/inbox/bad")).isSuperset(of: ["0-link", "1-fifo"]))
        #expect(playground.records("sync/outbox.jsonl").count == 1, "the event behind them is taken")
        #expect(!sync.stderr.contains("s3cr3t") && !playground.read("sync/inbox/bad/0-link.error").contains("s3cr3t"))
        #expect(canary.damage() == nil)
    }

    /// A hard link in `inbox/new/` to a file outside that the directory's account may not read is
    /// said as a hard link, not as a permission to fix: advice about its owner or mode would be
    /// about the file outside.
    @Test func anUnreadableHardLinkInTheInboxIsSaidAsAHardLink() throws {
        guard getuid() == 0 else { return print("anUnreadableHardLinkInTheInboxIsSaidAsAHardLink: needs root to act as another account; not run") }
        let playground = try Playground()
        chmod(playground.path, 0o755)
        let outside = playground.path + "/outside.json"
        try #"{"id":"x","type":"basketDelta","products":[]}"#.write(toFile: outside, atomically: false, encoding: .utf8)
        #expect(chmod(outside, 0o600) == 0)
        let dir = playground.path + "/sync"
        let account = Account.agent.uid
        #expect(mkdir(dir, 0o755) == 0 && chown(dir, account, Account.agent.gid) == 0)
        #expect(try basketSync(["-C", dir, "init"], killAfter: 60, user: account)?.status == 0)
        #expect(link(outside, dir + "/inbox/new/leak") == 0)
        let sync = try basketSync(["-C", dir, "sync"], killAfter: 60, user: account)
        #expect(sync != nil)
        let error = playground.read("sync/inbox/bad/leak.error")
        #expect(error.contains("has 2 names (a hard link") && !error.contains("ermission"), "\(error)")
    }

    /// A hard link in `inbox/new/` to a file outside is set aside unread: its content never
    /// reaches `bad/*.error`, the log or the database. A `link()` delivery under way (two names,
    /// the other in `tmp/`) is still taken. The agent handles both at their creation, with no
    /// other event after them (its deliverer dead before removing the `tmp/` name): nothing
    /// else would report them.
    @Test(arguments: [false, true])
    func aHardLinkInTheInboxIsSetAsideUnread(agent: Bool) async throws {
        let playground = try Playground()
        let outside = playground.path + "/outside.json"
        try #"{"id":"x","type":"s3cr3t-type"}"#.write(toFile: outside, atomically: false, encoding: .utf8)
        #expect(chmod(outside, 0o600) == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: outside))
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        let running = agent ? try AgentProcess(directory: dir) : nil
        if let running { try await running.waitUntilWatching() }
        // A delivery by link(): tmp/ name, then new/ name; the tmp/ name not removed yet.
        try #"{"id":"linked","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#.write(toFile: dir + "/inbox/tmp/d1", atomically: false, encoding: .utf8)
        #expect(link(dir + "/inbox/tmp/d1", dir + "/inbox/new/d1") == 0)
        #expect(link(outside, dir + "/inbox/new/leak") == 0)
        if let running {
            try await eventually("the hard link is set aside") { playground.names("sync/inbox/bad").contains("leak") }
            try await eventually("the link() delivery is taken") { playground.records("sync/outbox.jsonl").count == 1 }
            #expect(running.stop() == 0)
            #expect(!running.log.contains("s3cr3t"), "\(running.log)")
        } else {
            let sync = try basketSync(["-C", dir, "sync"])
            #expect(sync.status == 0, "\(sync.stderr)")
            #expect(!sync.stderr.contains("s3cr3t") && !sync.stdout.contains("s3cr3t"))
        }
        #expect(playground.names("sync/inbox/bad").contains("leak"))
        #expect(playground.read("sync/inbox/bad/leak.error").contains("has 2 names (a hard link"), "\(playground.read("sync/inbox/bad/leak.error"))")
        #expect(playground.read("sync/inbox/bad/leak.error").hasPrefix(dir + "/inbox/bad/leak: "), "it names the file where it lies now: \(playground.read("sync/inbox/bad/leak.error"))")
        #expect(!playground.read("sync/inbox/bad/leak.error").contains("s3cr3t"))
        #expect(playground.records("sync/outbox.jsonl").compactMap { $0["source"] as? String } == ["linked"], "the link() delivery is taken")
        let status = try basketSync(["-C", dir, "status", "--json"])
        #expect(!status.stdout.contains("s3cr3t"), "nothing of it in the database: \(status.stdout)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: outside)) == before)
        #expect(((try? FileManager.default.attributesOfItem(atPath: outside)[.posixPermissions]) as? Int) == 0o600)
    }

    /// The commit signal, or a tree cart's marker, hard-linked to a file elsewhere is replaced at
    /// a commit, not touched: the file elsewhere keeps its bytes and modification time.
    @Test(arguments: [false, true])
    func aHardLinkedCommitSignalOrMarkerIsReplacedNotTouched(tree: Bool) throws {
        let playground = try Playground()
        let victim = playground.path + "/victim"
        let dir = tree ? playground.path + "/root/c1" : playground.path + "/sync"
        _ = try basketSync(["-C", tree ? playground.path + "/root" : dir, "init"] + (tree ? ["--tree"] : []))
        if tree {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
            #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        }
        let signal = tree ? dir + "/.basket-sync-cart" : dir + "/.basket-sync/committed"
        // The victim holds what the name held (a marker must still match), then the name is linked to it.
        try ((try? Data(contentsOf: URL(fileURLWithPath: signal))) ?? Data()).write(to: URL(fileURLWithPath: victim))
        unlink(signal)
        var old = [timespec(tv_sec: 1_577_836_800, tv_nsec: 0), timespec(tv_sec: 1_577_836_800, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, victim, &old, 0) == 0)
        #expect(link(victim, signal) == 0)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: victim))
        #expect(try basketSync(["-C", dir, "set-store", "s1"]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == bytes)
        var info = stat()
        #expect(stat(victim, &info) == 0)
        #expect(info.st_mtim.tv_sec == 1_577_836_800, "the file elsewhere keeps its modification time (it may be read: a marker is)")
        #expect(info.st_nlink == 1, "the name in the directory is a file of its own now")
        #expect(try basketSync(["-C", dir, "status"]).status == 0)
    }

    /// The payment commands reject a cart that is not a regular file with 65, as sync and apply
    /// do (not 73); nothing is recorded.
    @Test(arguments: ["directory", "fifo", "link"])
    func handlePaymentRejectsACartThatIsNotAFileAsSyncDoes(shape: String) throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        #expect(try basketSync(["-C", dir, "set-store", "s", "--mode", "retailer"]).status == 0)
        switch shape {
        case "directory": try FileManager.default.createDirectory(atPath: dir + "/cart.json", withIntermediateDirectories: false)
        case "fifo": #expect(mkfifo(dir + "/cart.json", 0o644) == 0)
        default: try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: "/dev/zero")
        }
        guard let payment = try basketSync(["-C", dir, "handle-payment", "--total", "1.00", "--order-id", "o1"], killAfter: 20) else {
            Issue.record("handle-payment hung on a \(shape) cart")
            return
        }
        #expect(payment.status == 65, "\(shape): \(payment.status) \(payment.stderr)")
        #expect(try basketSync(["-C", dir, "sync"]).status == 65, "sync says the same")
        #expect(playground.records("payments.jsonl").isEmpty, "nothing recorded")
    }

    /// The database, its WAL or its SHM hard-linked to a file elsewhere is refused (73) before
    /// SQLite opens it, which would write that file; the file elsewhere keeps its bytes.
    @Test(arguments: ["state.db", "state.db-wal", "state.db-shm"])
    func aHardLinkedDatabaseFileIsRefused(name: String) throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        let victim = playground.path + "/victim"
        let path = dir + "/.basket-sync/" + name
        if name == "state.db" {
            #expect(rename(path, victim) == 0)
        } else {
            unlink(path)
            try "canary\n".write(toFile: victim, atomically: false, encoding: .utf8)
        }
        #expect(link(victim, path) == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: victim))
        for command in [["sync"], ["status"], ["set-store", "s1"]] {
            let run = try basketSync(["-C", dir] + command)
            #expect(run.status == 73 && run.stderr.contains("has 2 names (a hard link)"), "\(command): \(run.status) \(run.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == before, "the file elsewhere keeps its bytes")
    }

    /// A second bad delivery under a name bad/ holds never replaces the first and its .error:
    /// the first stays; the second goes under a name of its own. A `.error` left alone (a pass
    /// killed between writing it and moving its entry) gets its entry beside it, its reason
    /// written again: no `.error` stays without an entry.
    @Test func aSecondBadEventOfTheSameNameKeepsTheFirst() throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        for text in ["junk1", "junk2"] {
            try playground.write("inbox/new/same", text)
            #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        }
        let names = playground.names("inbox/bad")
        #expect(playground.read("inbox/bad/same") == "junk1", "the first stays: \(names)")
        let again = names.first { $0.hasPrefix("same.again.") && !$0.hasSuffix(".error") }
        #expect(again.map { playground.read("inbox/bad/" + $0) } == "junk2", "\(names)")
        #expect(names.filter { $0.hasSuffix(".error") }.count == 2, "\(names)")
        try playground.write("inbox/bad/left.error", "what a killed pass wrote\n")
        try playground.write("inbox/new/left", "junk3")
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(playground.read("inbox/bad/left") == "junk3" && playground.read("inbox/bad/left.error").contains("inbox/bad/left"), "\(playground.names("inbox/bad"))")
        #expect(!playground.names("inbox/bad").contains { $0.hasPrefix("left.again.") }, "\(playground.names("inbox/bad"))")
    }

    /// Whatever the names of bad deliveries — one the `.error` of another's name, one a name
    /// `bad/` holds, in any order — every entry set aside is kept with its own bytes under a
    /// name that is no reason's (never ending in `.error`), its reason beside it, and no reason
    /// without its entry: a seeded run of deliveries, judged by those words.
    @Test func badDeliveriesOfAnyNamesAreEachKeptBesideTheirReason() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        let names = ["a", "a.error", "a.error.error", "b.error", "b", "a.again.x", "a.again.x.error"]
        var delivered: [String] = []
        for index in 0..<24 {
            let name = names[rng.below(names.count)]
            let bytes = "bad delivery \(index) as \(name)"
            // A name new/ holds is taken first (a delivery never writes over one waiting).
            if playground.names("inbox/new").contains(name) { #expect(try basketSync(["-C", dir, "sync"]).status == 0, "seed \(seed)") }
            try playground.write("inbox/new/" + name, bytes)
            delivered.append(bytes)
            // One at a time, or several taken by one pass.
            if rng.below(2) == 0 || index == 23 { #expect(try basketSync(["-C", dir, "sync"]).status == 0, "seed \(seed)") }
        }
        let inBad = playground.names("inbox/bad")
        let entries = inBad.filter { !$0.hasSuffix(".error") }
        let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it): \(inBad.sorted())"
        #expect(entries.map { playground.read("inbox/bad/" + $0) }.sorted() == delivered.sorted(), "every delivery kept once with its bytes: \(context)")
        for entry in entries { #expect(playground.read("inbox/bad/\(entry).error").contains("inbox/bad/\(entry)"), "\(entry)'s reason names it: \(context)") }
        #expect(inBad.count == 2 * entries.count, "no reason without its entry: \(context)")
    }

    /// A cart hard-linked to a file outside is never read: rejected (65) by sync, apply and the
    /// payment commands, its content never read into a record; with `followSymlinks` (the
    /// operator's choice to point at a file elsewhere) it is read.
    @Test func aHardLinkedCartIsRejectedUnlessLinksAreFollowed() throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        #expect(try basketSync(["-C", dir, "set-store", "s", "--mode", "retailer"]).status == 0)
        #expect(try basketSync(["-C", dir, "push", "--state", "TOPSECRET=1"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        let outside = playground.path + "/outside.json"
        try cartJSON([("TOPSECRET", 3)]).write(toFile: outside, atomically: false, encoding: .utf8)
        #expect(link(outside, dir + "/cart.json") == 0)
        for command in [["sync"], ["apply"], ["handle-payment", "--total", "1.00", "--order-id", "o1"]] {
            let run = try basketSync(["-C", dir] + command)
            #expect(run.status == 65 && run.stderr.contains("has 2 names (a hard link)"), "\(command): \(run.status) \(run.stderr)")
        }
        #expect(!playground.read("sync/notifications.jsonl").contains("TOPSECRET"), "nothing read from it")
        #expect(playground.records("sync/payments.jsonl").isEmpty)
        try playground.writeAtomically("sync/basket-sync.json", playground.read("sync/basket-sync.json").replacingOccurrences(of: "\"followSymlinks\": false", with: "\"followSymlinks\": true"))
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(playground.read("sync/notifications.jsonl").contains("TOPSECRET"), "followed by choice")
    }

    /// The agent, given a FIFO for a cart, rejects it and still stops on SIGTERM.
    @Test func aFIFOCartNeitherHangsTheAgentNorKeepsItFromStopping() async throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        let agent = try AgentProcess(directory: dir)
        try await agent.waitUntilWatching()
        #expect(mkfifo(dir + "/fifo", 0o644) == 0)
        try FileManager.default.moveItem(atPath: dir + "/fifo", toPath: dir + "/cart.json")
        try await eventually("the agent rejects the FIFO") { agent.log.contains("cart.json:1:1: is a FIFO") }
        #expect(agent.stop(SIGTERM) == 0)
    }
}

extension FileShapeTests {
    /// Files stamped past what 64 bits of nanoseconds hold (after 2262, before 1677 — `touch -d`,
    /// by whoever may write them) are read with their times held at the bound: every command and
    /// the agent go on, never trap; the cart is taken, the records written.
    @Test(arguments: [10_000_000_000, -10_000_000_000, 16_000_000_000] as [Int])
    func filesStampedPastTheRangeOfNanosecondsAreRead(seconds: Int) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "push", "--id", "first", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.write("inbox/new/e2", #"{"id":"e2","type":"basketDelta","products":[{"id":"B","quantity":1}]}"#)
        try playground.write("cart.json", cartJSON([("A", 1), ("X", 1)], syncedThrough: 1))
        // Every file and folder of the directory, the cart and the events included.
        var stamped = 0
        for entry in [""] + FileManager.default.enumerator(atPath: playground.path)!.compactMap({ $0 as? String }) {
            var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
            if utimensat(AT_FDCWD, playground.path + "/" + entry, &times, AT_SYMLINK_NOFOLLOW) == 0 { stamped += 1 }
        }
        #expect(stamped > 5)
        for command in [["sync"], ["status"], ["status", "--json"], ["metrics"], ["apply"], ["wait", "--timeout", "0"], ["validate", "cart.json"], ["sync"]] {
            let run = try basketSync(["-C", playground.path] + command)
            #expect(run.status < 128, "\(seconds) s: \(command): \(run.status) \(run.stderr)")
        }
        #expect(playground.records("outbox.jsonl").compactMap { $0["source"] as? String } == ["first", "e2"])
        #expect(!playground.records("notifications.jsonl").isEmpty, "the cart was taken")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("B", 1), ("X", 2)], syncedThrough: 2))
        try await eventually("the agent takes the next cart") { playground.records("notifications.jsonl").contains { ($0["syncedThrough"] as? Int) == 2 } }
        #expect(agent.stop() == 0, "\(agent.log)")
    }
}
