import BasketSync
import BasketSyncAgent
import BasketSyncWire
import Seeded

/// One scenario in its scratch sync directory.
struct ScenarioRun {
    let name: String
    let directory: String
    let configuration: AgentConfiguration
    let command: [String]
    let inotify: Inotify
    /// The limit on one run of the host's command, in seconds.
    let runLimit: Double
    let engine: SyncEngine
    /// The settings file copied into each scratch directory.
    let settings: [UInt8]?
    /// The cart's syncedThrough when the last run started: what it should have skipped.
    var claimBefore: UInt64 = 0
    /// The cart's quantities when the last run started.
    var quantitiesBefore: [ExactID: Int] = [:]
    /// A run killed on a cart whose syncedThrough and lines disagree (lines ahead of it, or it
    /// ahead of the lines): the detail of the acknowledgement in another cart it would be, until
    /// a whole run tells it from a host whose syncedThrough is wrong whole runs long (see
    /// ``Scenario/crash``).
    var lateAcknowledgement: String?
    /// A run went past the time limit: the other scenarios would only wait it out again.
    var neverExits = false
    var findings: [HostCheck.Finding] = []
    /// The cart the scenario starts from: quantities, labels, other fields.
    var initial = LeftCart()
    /// The identity of the cart check-host wrote, and whether the host wrote one since.
    var initialIdentity: FileIdentity?
    var hostWroteCart = false
    /// Whether the host left, once at least, a cart basket-sync reads.
    var hostLeftReadableCart = false
    /// The outbox's records, as check-host made them (read again after each push): what a cart
    /// the host writes is judged against while the host runs, without asking the database (the
    /// host may hold its write lock while it is stopped for the look).
    var outbox: [OutboxRecord] = []
    /// The host wrote the cart in place during the run (inotify saw it modified).
    var wroteInPlace = false
    /// A cart the host wrote whose syncedThrough covered records its lines did not hold yet, in
    /// the current run: the detail, until a later cart of the same run shows it was an early
    /// acknowledgement (then a finding) or the run ends on it (then the final check judges it).
    var earlyAcknowledgement: String?
    /// The host was seen acknowledging before applying in this scenario.
    var acknowledgedEarly = false
    var keys: CartKeys { configuration.keys }
    var cartPath: String { "\(directory)/\(configuration.cart)" }

    init(name: String, root: String, settings: [UInt8]?, configuration: AgentConfiguration, command: [String], inotify: Inotify, runLimit: Double) throws(AgentError) {
        self.name = name
        directory = "\(root)/\(name)"
        self.configuration = configuration
        self.command = command
        self.inotify = inotify
        self.runLimit = runLimit
        self.settings = settings
        _ = try Commands.initialize(directory: directory)
        if let settings {
            do { try Posix.writeFileAtomically("\(directory)/\(AgentConfiguration.fileName)", settings, replacing: true) } catch { throw .system(error) }
        }
        try Posix.makeDirectoryTree(Posix.dirname(of: "\(directory)/\(configuration.cart)"))
        // basket-sync's own log of the scenario stays beside it, out of the report.
        let log: Int32
        do { log = try Posix.open("\(directory)/basket-sync.log", [.writeOnly, .create, .append], mode: 0o600) } catch { throw .system(error) }
        engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: Logger(fd: log))
        do { try inotify.watch(Posix.dirname(of: cartPath), [.modify, .closeWrite, .movedTo, .onlyDirectory]) } catch { throw .system(error) }
    }

    // MARK: Setting up

    /// Writes the starting cart with the host's key names: each line with a label, a field of
    /// the host's own at the top, syncedThrough 0.
    mutating func start(_ lines: KeyValuePairs<String, Int>) throws(AgentError) {
        var writer = JSONWriter()
        writer.object { object in
            object.member(named: keys.products) { writer in
                writer.array(Array(lines)) { writer, line in
                    writer.object { member in
                        member.member(named: keys.id) { $0.string(line.key) }
                        member.member(named: keys.quantity) { $0.integer(line.value) }
                        member.member(named: keys.id == "label" || keys.quantity == "label" ? "hostLabel" : "label") { $0.string("label of \(line.key)") }
                    }
                }
            }
            object.member(named: keys.products == "hostNote" || keys.syncedThrough == "hostNote" ? "hostNote2" : "hostNote") { writer in
                writer.object { $0.member("keep", true); $0.member("text", "the host's own field") }
            }
            object.member(named: keys.syncedThrough) { $0.integer(0) }
        }
        writer.raw("\n")
        do { try Posix.writeFileAtomically(cartPath, writer.bytes, replacing: true) } catch { throw .system(error) }
        guard let cart = try leftCart() else { throw .badData(path: cartPath, line: 1, column: 1, reason: "check-host could not read back the cart it wrote") }
        initial = cart
        initialIdentity = Posix.info(cartPath, follow: false)?.identity
        // The agent's view: the first cart is its baseline.
        try engine.pass(.everything)
    }

    /// Pushes one record of `deltas`, with a line of its own added (`R01`, `R02`, …): which
    /// records a cart holds is then read from it, never guessed (records alike, or a record of
    /// removals alone, look like another mistake otherwise).
    mutating func push(_ deltas: [(String, Int)]) throws(AgentError) {
        let own = outbox.filter { $0.type == .updateBasket }.count + 1
        let deltas = deltas + [("R\(own < 10 ? "0" : "")\(own)", 1)]
        _ = try Commands.push(directory: directory, kind: .delta, products: deltas.map { RetailerProduct(id: $0.0, quantity: $0.1) }, id: nil)
        try engine.pass([.inbox])
        outbox = try records()
    }

    mutating func pushRedirect() throws(AgentError) {
        _ = try Commands.push(directory: directory, kind: .redirect, products: [], id: nil)
        try engine.pass([.inbox])
        outbox = try records()
    }

    /// Random deltas on A–D that never take a line of `holding` below 0 (and keep it up to date).
    func randomDeltas(_ random: inout SplitMix64, holding: inout [String: Int]) -> [(String, Int)] {
        var deltas: [(String, Int)] = []
        for _ in 0...random.below(3) {
            let id = ["A", "B", "C", "D"][random.below(4)]
            guard !deltas.contains(where: { $0.0 == id }) else { continue }
            var delta = 1 + random.below(3)
            if random.below(2) == 0 { delta = -min(delta, holding[id] ?? 0) }
            guard delta != 0 else { continue }
            holding[id, default: 0] += delta
            deltas.append((id, delta))
        }
        return deltas
    }

    // MARK: Running the host

    mutating func spawn() throws(AgentError) -> SpawnedProcess {
        _ = try? inotify.events()
        wroteInPlace = false
        earlyAcknowledgement = nil
        let left = (try? leftCart()) ?? nil
        claimBefore = left?.syncedThrough ?? 0
        quantitiesBefore = left?.quantities ?? [:]
        do {
            return try SpawnedProcess(command, directory: directory, environment: ["BASKET_SYNC_DIR": directory], log: "\(directory)/host.log")
        } catch {
            throw .missingInput("check-host: cannot run \(JSONWriter.cut(command[0])): \(error.reason); give a command on the PATH or a path to one")
        }
    }

    /// Waits for the run to end (killing it past the limit); false when it failed.
    mutating func finish(_ process: SpawnedProcess) throws(AgentError) -> Bool {
        let deadline = Date().addingTimeInterval(runLimit)
        var status = process.exitStatus()
        while status == nil, Date() < deadline {
            if Interruption.requested { process.killAll(); throw HostCheck.interrupted }
            observe()
            // Woken by the cart's next version or by the run's end at once (where the kernel
            // cannot tell the end, a millisecond at most later).
            _ = try? Posix.waitReadable(process.endFD >= 0 ? [inotify.fd, process.endFD] : [inotify.fd], timeout: process.endFD >= 0 ? 100 : 1)
            status = process.exitStatus()
        }
        // What it left running in its process group (a child in the background) goes with it.
        process.killAll()
        observe()
        capLog()
        guard let status else {
            fail(.exits, "it was still running after \(runLimit) s; check-host runs a host's one-shot apply (apply what waits, then exit), not a loop")
            neverExits = true
            return false
        }
        checkWrites()
        if status != 0 {
            fail(.exits, "it exited with status \(status) (its output is in \(directory)/host.log)")
            return false
        }
        return true
    }

    mutating func runOnce() throws(AgentError) -> Bool { try finish(try spawn()) }

    /// Keeps the last MiB of what the host printed: a chatty host does not fill the disk.
    func capLog() {
        let path = "\(directory)/host.log"
        guard let info = Posix.info(path, follow: true), info.size > 1 << 20,
              let fd = try? Posix.open(path, [.readWrite]) else { return }
        defer { Posix.close(fd) }
        if let tail = try? Posix.read(fd, at: info.size - (1 << 20), count: 1 << 20, path: path) {
            _ = try? Posix.truncate(fd, to: 0, path: path)
            _ = try? Posix.writeAll(fd, Array("[check-host: the host printed \(info.size) bytes; the last MiB follows]\n".utf8) + tail, at: 0, path: path)
        }
    }

    /// Runs once and checks the cart against every record.
    @discardableResult
    mutating func runAndCheck() throws(AgentError) -> Bool {
        try check(afterRun: "its run")
    }

    /// Runs once and checks the cart against every record, the run named `moment`.
    @discardableResult
    mutating func check(afterRun moment: String) throws(AgentError) -> Bool {
        guard try runOnce() else { return false }
        return try check(after: moment, expectAll: true)
    }

    /// A whole run's duration (this directory is used up by it).
    mutating func measureRun() throws(AgentError) -> Double {
        let started = Date()
        let process = try spawn()
        let deadline = started.addingTimeInterval(runLimit)
        while process.exitStatus() == nil {
            if Interruption.requested { process.killAll(); throw HostCheck.interrupted }
            if Date() > deadline { break }
            Posix.pause(microseconds: 500)
        }
        process.killAll()
        _ = try? inotify.events()
        return max(0.005, Date().timeIntervalSince(started))
    }

    /// Looks at what inotify saw of the cart since the last look: a write in place is noted; each
    /// version the host closed or renamed into place is judged at once (a run's loop wakes on
    /// the event: a version that stands for a millisecond is seen; one the host replaces within
    /// microseconds may not be, as a reader would hardly see it).
    mutating func observe() {
        let cartName = Posix.basename(of: cartPath)
        let cartDirectory = Posix.dirname(of: cartPath)
        let events = ((try? inotify.events()) ?? []).filter {
            $0.name == cartName && inotify.path(of: $0.watch).map { $0.hasPrefix(cartDirectory) } == true
        }
        guard !events.isEmpty else { return }
        if events.contains(where: { $0.mask.contains(.modify) }) { wroteInPlace = true }
        guard events.contains(where: { $0.mask.contains(.movedTo) || $0.mask.contains(.closeWrite) }) else { return }
        judgeVersion()
    }

    /// Judges the cart on disk as one version the host wrote: a cart whose syncedThrough covers
    /// records its lines do not hold yet — its lines are what fewer records lead to — is an
    /// acknowledgement ahead of the lines. Held until the run shows which it is: a later
    /// consistent cart makes it an early acknowledgement (basket-sync may read the cart in
    /// between and take records as applied that are not), a run ending on it claims too far.
    mutating func judgeVersion() {
        guard let cart = try? leftCart(), let claim = cart.syncedThrough, claim <= (outbox.last?.seq ?? 0) else { return }
        let covered = outbox.filter { $0.seq <= claim }
        if cart.quantities == model(covered) {
            if let early = earlyAcknowledgement {
                fail(.acknowledgesWithLines, early)
                acknowledgedEarly = true
                earlyAcknowledgement = nil
            }
            return
        }
        // The lines are those of fewer records: the acknowledgement went ahead of them.
        for count in stride(from: covered.count - 1, through: 0, by: -1) where model(Array(covered.prefix(count))) == cart.quantities {
            let through = count == 0 ? 0 : covered[count - 1].seq
            earlyAcknowledgement = "it wrote a cart saying \"\(keys.syncedThrough)\" \(claim) whose lines held only records 1…\(through) (\(cart.shown)), then the lines in a later cart: basket-sync may read the first one and take records \(through + 1)…\(claim) as applied when they are not; write the lines and \"\(keys.syncedThrough)\" in the same cart, once"
            return
        }
        // The lines are those of more records: the acknowledgement comes in a later cart. Killed
        // in between, the next run applies those records again.
        for count in (covered.count + 1)...max(covered.count + 1, outbox.count) where count <= outbox.count && model(Array(outbox.prefix(count))) == cart.quantities {
            let through = outbox[count - 1].seq
            earlyAcknowledgement = "it wrote a cart holding the lines of records 1…\(through) (\(cart.shown)) but saying \"\(keys.syncedThrough)\" \(claim), then \"\(keys.syncedThrough)\" in a later cart: killed in between, its next run applies records \(claim + 1)…\(through) again; write the lines and \"\(keys.syncedThrough)\" in the same cart, once"
            return
        }
    }

    /// A write into the cart in place, seen by inotify during the run.
    mutating func checkWrites() {
        if wroteInPlace {
            fail(.atomic, "it wrote \(configuration.cart) in place (the file was modified, not replaced): a reader can see half a cart; write a temp file in the same directory and rename it over the cart")
        }
    }
}
