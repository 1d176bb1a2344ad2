/// What the JSON Lines files hold when the database that made them was lost: the input of
/// recovery (`init --adopt`), read by the shell, decided here.
public struct RecoveredRecords: Hashable, Sendable {
    /// The outbox records the files hold (rotated parts included), in seq order.
    public var outbox: [OutboxRecord]
    /// The notifications the files hold, in seq order.
    public var notifications: [BasketNotification]
    /// The payment records the files hold, in seq order.
    public var payments: [PaymentRecord]
    /// The `syncedThrough` of the host's cart as it stands; nil when the cart has none (0 is a
    /// claim: the host acknowledges).
    public var cartClaim: UInt64?
    /// The last outbox seq that existed when that cart was written (the records made before its
    /// last write, by their time); nil when unknown (no cart).
    public var cartWrittenThrough: UInt64?
    /// Events taken since the cart was last written (filed in `inbox/cur/` after it): each may
    /// have made one record the files no longer hold.
    public var eventsSinceCart: UInt64
    /// Records made after the last the files hold, lost from them (a last line torn by a crash)
    /// but held by the host (its claim reaches them): their numbers are never used again.
    public var heldAfterOutbox: UInt64 = 0
    /// The host's cart as it stands (its lines), when it can be read: taken when it was written.
    public var cartLines: [RetailerProduct]?
    /// When the host's cart was last written (its modification time), if known.
    public var cartModified: Date?

    /// What the files hold, and the cart's claim.
    public init(
        outbox: [OutboxRecord] = [], notifications: [BasketNotification] = [], payments: [PaymentRecord] = [],
        cartClaim: UInt64? = nil, cartWrittenThrough: UInt64? = nil, eventsSinceCart: UInt64 = 0,
        cartLines: [RetailerProduct]? = nil, cartModified: Date? = nil
    ) {
        self.cartLines = cartLines
        self.cartModified = cartModified
        self.outbox = outbox
        self.notifications = notifications
        self.payments = payments
        self.cartClaim = cartClaim
        self.cartWrittenThrough = cartWrittenThrough
        self.eventsSinceCart = eventsSinceCart
    }

    /// The highest record the host has shown it processed — its cart's claim, the last
    /// notification's — so that a new database numbers its records after it: an old claim never
    /// acknowledges a new record (docs/spec.md §3: seq rises forever), whatever files went away.
    public var hostClaim: UInt64 { max(cartClaim ?? 0, notifications.last?.syncedThrough ?? 0) }

    /// Whether the host acknowledges with `syncedThrough`: its cart or the last notification has one.
    public var hostAcknowledges: Bool { cartClaim != nil || notifications.last?.syncedThrough != nil }
}

extension SyncStateMachine {
    /// Recovery (`init --adopt`): the state of a new database rebuilt from the records the files
    /// hold. Every seq goes on after them; a recorded order stays recorded and a landed transfer
    /// landed; the Mealz basket goes on after the last one the payments and notifications show.
    /// When the files hold the whole history, it is played again through the rules (the cart on
    /// disk at its last write included) and the state it leads to is taken. Otherwise Mealz's
    /// lines are those of the last notification (Mealz's share taken as what was notified,
    /// emptied by a payment recorded after it). For a host that acknowledges with `syncedThrough`, the deltas
    /// after its claim are pending again; records before the first one the files hold that the
    /// host had not processed are lost, and the host goes on from the first one held. Nothing is
    /// written: the records are in the files already.
    public mutating func recover(from records: RecoveredRecords) -> [SyncEffect] {
        willRewritePending()
        if let last = records.outbox.last?.seq { state.lastOutboxSeq = last.addingReportingOverflow(records.heldAfterOutbox).overflow ? .max : last + records.heldAfterOutbox }
        // The last notification's syncedThrough was checked against the outbox before the loss:
        // records went that far, whatever files the host moved away since (seq rises forever).
        state.lastOutboxSeq = max(state.lastOutboxSeq, records.notifications.last?.syncedThrough ?? 0)
        for record in records.outbox {
            if let transfer = record.transferId { state.landedTransfers.insert(ExactID(transfer)) }
        }
        if let last = records.notifications.last?.seq { state.lastNotificationSeq = last }
        if let last = records.payments.last?.seq { state.lastPaymentSeq = last }
        for payment in records.payments {
            // A recorded handlePayment closed its basket.
            let closed = payment.type == .handlePayment && payment.status == .recorded
            state.basket = max(state.basket, payment.basket + (closed ? 1 : 0))
            // A retried order must still be answered as recorded.
            if payment.type == .handlePayment, let order = payment.orderId { state.recordedOrders[ExactID(order)] = payment.seq }
        }
        // What the host and the WebView were last shown: the next cart or basketState is compared
        // with it, not with nothing.
        if let notice = records.notifications.last {
            state.basket = max(state.basket, notice.basket)
            var lines: [ExactID: Int] = [:]
            for product in notice.products where product.quantity > 0 { lines[ExactID(product.id), default: 0] += product.quantity }
            let closed = records.payments.contains { $0.type == .handlePayment && $0.status == .recorded && $0.at >= notice.at }
            state.lastNotified = lines
            state.viewBase = closed ? [:] : lines
            if !closed { state.confirmed = lines }
            state.lastNotifiedSyncedThrough = notice.syncedThrough
        }
        let claim = records.hostClaim
        let outbox = records.outbox
        // Every record moved away: numbered after what the host claims to have processed, and
        // after the records the events taken since its cart may have made — never a number a
        // record may have had (docs/spec.md §3: seq rises forever).
        if outbox.isEmpty { state.lastOutboxSeq = max(state.lastOutboxSeq, claim.addingReportingOverflow(records.eventsSinceCart).overflow ? .max : claim + records.eventsSinceCart) }
        let firstHeld = outbox.first.map { $0.seq - 1 } ?? 0
        // The notifications are whole when they start at the first one — and a cart was told at
        // all, when there is one (a removed notifications file leaves what the host showed unknown).
        let notificationsWhole = records.notifications.first.map { $0.seq == 1 } ?? (records.cartLines == nil && records.cartClaim == nil)
        if !outbox.isEmpty, firstHeld == 0, notificationsWhole {
            // The whole history is in the files: played again through the rules, the cart on
            // disk last — the share (what was acknowledged, echoed, paid, the shopper's own
            // units left out), what is pending or rolled back, the basis. What the WebView was
            // last told stays the files' last notification, so that the next pass tells the rest.
            let replayed = replaying(records, after: 0)
            state.confirmed = replayed.confirmed
            state.shareFollowedAhead = replayed.shareFollowedAhead
            state.pending = replayed.pending
            state.rolledBack = replayed.rolledBack
            state.hostCart = replayed.hostCart
            state.hostSyncedThrough = replayed.hostSyncedThrough
            state.hostClaim = replayed.hostClaim
            state.echoedThrough = replayed.echoedThrough
            state.echoedAhead = replayed.echoedAhead
            state.viewBase = replayed.viewBase
            state.viewCountsThrough = replayed.viewCountsThrough
            state.cartShowsThrough = replayed.cartShowsThrough
            state.paidThrough = replayed.paidThrough
            return []
        }
        // A host that never acknowledged had its batches settled by echoes, which no file says:
        // the files' history is played again through the rules to find them (a legacy host
        // moving to apply must not get them twice).
        let replayed = outbox.isEmpty ? nil : replaying(records, after: firstHeld)
        let echoed = replayed?.echoedThrough ?? 0
        if let replayed, !records.hostAcknowledges {
            // A host that never acknowledged: the batches still in their window, or rolled back
            // and still to be confirmed late, are where the files' history left them.
            state.pending = replayed.pending
            state.rolledBack = replayed.rolledBack
        }
        // A gap in what the host was seen to show (the notifications file removed or rotated
        // away): a host without syncedThrough is taken to have processed the records made before
        // its cart's last write — never applied twice; `init --adopt` names them.
        let unseen = !notificationsWhole && !records.hostAcknowledges ? min(records.cartWrittenThrough ?? 0, outbox.last?.seq ?? 0) : 0
        if !outbox.isEmpty, max(firstHeld, echoed, unseen) > 0, !records.hostAcknowledges || echoed > 0 {
            state.echoedThrough = max(firstHeld, echoed, unseen)
            if !records.hostAcknowledges { state.pending.removeAll { $0.seq <= state.echoedThrough! } }
        }
        if !outbox.isEmpty, records.hostAcknowledges {
            // The deltas after what it acknowledged are pending again (waiting for its
            // syncedThrough, as before the loss). What it acknowledged: what the last notification
            // says basket-sync had acknowledged, or more by its cart's claim — unless that claim
            // names a record that did not exist when the cart was written (rule 4, by the
            // records' times), or is beyond the files: then it acknowledges nothing.
            let cartClaim = records.cartClaim ?? 0
            let verified = min(records.notifications.last?.syncedThrough ?? 0, state.lastOutboxSeq)
            let claimHolds = cartClaim <= min(state.lastOutboxSeq, records.cartWrittenThrough ?? state.lastOutboxSeq)
            let acknowledged = max(claimHolds ? cartClaim : 0, verified, firstHeld, echoed)
            state.hostSyncedThrough = acknowledged
            // The claim as written, so that it is not reported again.
            state.hostClaim = claim
            state.pending = outbox.compactMap { record in
                guard record.seq > acknowledged, record.type == .updateBasket, !record.products.isEmpty else { return nil }
                return PendingBatch(seq: record.seq, products: record.products, at: record.at, deadline: nil)
            }
            // The deltas the cart's claim acknowledges beyond what the last notification said are
            // settled now: Mealz's share counts them, as it would have had the cart been taken
            // before the loss (the notified lines hold what came before).
            // Those made before the last recorded payment were paid with its basket; those after
            // are in the cart the WebView is told next: in its basis too.
            let notified = max(verified, firstHeld)
            let paidAt = records.payments.last { $0.type == .handlePayment && $0.status == .recorded }?.at
            for record in outbox where record.seq > notified && record.seq <= acknowledged && record.type == .updateBasket {
                if let paidAt, record.at <= paidAt { continue }
                settle(PendingBatch(seq: record.seq, products: record.products, at: record.at, deadline: nil))
                if var base = state.viewBase {
                    RetailerProduct.apply(record.products, to: &base)
                    state.viewBase = base
                }
            }
        }
        return []
    }
}

extension SyncStateMachine {
    /// The state the files' history leads to, played again in
    /// time order: each outbox record as the input that made it, each notification as the cart
    /// it told, with the acknowledgement it said (its Mealz-related lines are all an echo looks
    /// at; once the host acknowledges, nothing is echoed any more).
    func replaying(_ records: RecoveredRecords, after firstHeld: UInt64) -> SyncState {
        var replay = SyncStateMachine(state: SyncState(syncId: "replay"), configuration: configuration, isSynchronizerRegistered: true)
        replay.state.lastOutboxSeq = firstHeld
        var outbox = records.outbox[...]
        var notices = records.notifications[...]
        var payments = records.payments.filter { $0.type == .handlePayment && $0.status == .recorded }[...]
        var noticedBasket = records.notifications.first?.basket ?? 1
        replay.state.basket = noticedBasket
        // A recorded payment closes its basket as it did (whatever the share the replay counts).
        func pay(through instant: Date) {
            while let payment = payments.first, payment.at <= instant {
                payments.removeFirst()
                _ = replay.closeBasket()
                _ = replay.notifyBasketOpened(at: payment.at)
            }
        }
        // The cart on disk, taken when it was written, as a pass would have (its claim with the
        // lines last told when its lines are not known).
        var cart: (lines: [RetailerProduct]?, at: Date)? = records.cartClaim != nil || records.cartLines != nil
            ? (records.cartLines, records.cartModified ?? .distantFuture) : nil
        func takeCart() {
            guard let pending = cart else { return }
            cart = nil
            let lastTold = replay.state.hostCart.map { lines in lines.keys.sorted().map { RetailerProduct(id: $0.string, quantity: lines[$0]!) } } ?? []
            let last = [records.outbox.last?.at, records.notifications.last?.at, records.payments.last?.at].compactMap { $0 }.max() ?? Date()
            _ = try? replay.retailerBasketChanged(
                pending.lines ?? lastTold, syncedThrough: records.cartClaim,
                outboxSeqWhenWritten: records.cartWrittenThrough ?? replay.state.lastOutboxSeq, at: min(pending.at, last))
        }
        while !outbox.isEmpty || !notices.isEmpty || !payments.isEmpty {
            // One instant: the record first, then the cart told (a payment takes the cart first),
            // then the payment.
            let recordAt = outbox.first?.at ?? .distantFuture
            let noticeAt = notices.first?.at ?? .distantFuture
            let paymentAt = payments.first?.at ?? .distantFuture
            if let at = cart?.at, at < recordAt, at <= noticeAt, at <= paymentAt {
                takeCart()
            } else if let record = outbox.first, recordAt <= noticeAt, recordAt <= paymentAt {
                outbox.removeFirst()
                replay.state.lastOutboxSeq = record.seq - 1
                let event: MealzEvent = record.type == .updateBasket ? .basketDelta(record.products) : .redirectToCart
                _ = try? replay.receive(event, source: nil, at: record.at)
            } else if let notice = notices.first, noticeAt <= paymentAt {
                notices.removeFirst()
                if notice.basket > noticedBasket {
                    // A notification opening a basket: the replay opens it itself — by the
                    // payment that closed the last one, else by the store change it tells.
                    noticedBasket = notice.basket
                    pay(through: notice.at)
                    if replay.state.basket < notice.basket {
                        // No payment record explains it (the file may be gone): the lines it
                        // lists tell. A store change keeps the basis; a payment leaves only what
                        // is on its way.
                        let told = Dictionary(notice.products.map { (ExactID($0.id), $0.quantity) }, uniquingKeysWith: +).filter { $0.value > 0 }
                        if told != replay.mealzView {
                            var closing = replay
                            _ = closing.closeBasket()
                            if closing.mealzView == told { replay = closing }
                        }
                        replay.state.basket = notice.basket
                        _ = replay.notifyBasketOpened(at: notice.at)
                    }
                } else {
                    // Its acknowledgement was checked before the loss: the records it names
                    // existed, in files the host may have moved away since.
                    replay.state.lastOutboxSeq = max(replay.state.lastOutboxSeq, notice.syncedThrough ?? 0)
                    // It says what was acknowledged, not what the cart claimed: one that
                    // acknowledged nothing new may have been a claim refused or missing, so it
                    // is taken as a cart that says nothing new (what it shows still counts).
                    let new = notice.syncedThrough.flatMap { acknowledged in
                        replay.state.hostSyncedThrough.map { acknowledged > $0 } ?? true ? acknowledged : nil
                    }
                    // Told after the cart on disk was last written: of that version (no later
                    // one exists), which was written before the records after the ones that
                    // existed at its time — it can echo none of those.
                    let writtenThrough = records.cartModified.flatMap { $0 <= notice.at ? records.cartWrittenThrough : nil }
                    _ = try? replay.retailerBasketChanged(
                        notice.products, syncedThrough: new,
                        outboxSeqWhenWritten: min(writtenThrough ?? replay.state.lastOutboxSeq, replay.state.lastOutboxSeq), at: notice.at)
                }
            } else {
                pay(through: paymentAt)
            }
        }
        takeCart()
        return replay.state
    }
}

extension SyncState {
    /// Whether `products` are the lines of the host cart last taken (lines at 0 aside): a cart
    /// file whose times moved without its modification time or size may be that version (a
    /// chmod) when its lines are these, and is a write in place when they are not.
    public func showsTheCartTaken(_ products: [RetailerProduct]) -> Bool {
        guard let hostCart else { return false }
        return ProductTally(products).quantities.filter { $0.value != 0 } == hostCart
    }

    /// The host's progress: the highest outbox seq it has processed as far as basket-sync can
    /// tell — acknowledged (`syncedThrough`) or echoed (a host without it) — or what its cart says
    /// now (`claim`, nil: none), checked as an acknowledgement is: it counts only when it claims
    /// no record beyond `writtenThrough`, the last seq that existed when that cart was written.
    /// `apply` starts after it, `wait` waits for the records after it and `status` shows it: one
    /// value, so that none lists a record another would skip.
    public func hostProgress(claim: UInt64?, writtenThrough: UInt64) -> UInt64 {
        let claimed = claim.map { $0 <= min(lastOutboxSeq, writtenThrough) ? $0 : 0 } ?? 0
        return max(hostSyncedThrough ?? 0, echoedThrough ?? 0, claimed)
    }

    /// Which outbox records retention may remove (when old enough): those the host acknowledged
    /// through its `syncedThrough`, or — a host without it — through the highest batch its cart
    /// echoed, never a pending batch, nor a batch rolled back and never echoed since (the
    /// library keeps the last ones it can still confirm late) unless a `syncedThrough` covers it.
    public var outboxRetention: OutboxRetention {
        let synced = hostSyncedThrough ?? 0
        return OutboxRetention(
            through: max(synced, echoedThrough ?? 0),
            pending: Set(pending.map(\.seq)),
            unechoed: Set(rolledBack.map(\.seq).filter { $0 > synced }))
    }
}

/// What retention may remove of the outbox (``SyncState/outboxRetention``).
public struct OutboxRetention: Hashable, Sendable {
    /// The highest seq the host processed: nothing after it goes.
    public var through: UInt64
    /// The batches still pending: they stay.
    public var pending: Set<UInt64>
    /// The batches rolled back and never echoed since: they stay, to be confirmed late.
    public var unechoed: Set<UInt64>

    /// Whether the record `seq` may go (its age aside).
    public func mayRemove(_ seq: UInt64) -> Bool {
        seq <= through && !pending.contains(seq) && !unechoed.contains(seq)
    }
}
