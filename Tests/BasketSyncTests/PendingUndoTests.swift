import BasketSync
import Foundation
import Testing

/// What the agent takes an input back with (the machine's undo of the pending batches, never a
/// copy of them), and the earliest window the machine keeps from one input to the next.
@Suite struct PendingUndoTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// A machine of a host that never acknowledges, with `count` batches pending (windows of 10 s).
    static func machine(pending count: Int) throws -> SyncStateMachine {
        var machine = SyncStateMachine(state: SyncState(syncId: "u"), isSynchronizerRegistered: true)
        for index in 0..<count {
            _ = try machine.receive(.basketDelta([RetailerProduct(id: "s\(index % 3)", quantity: 1)]), source: "e\(index)", at: start.addingTimeInterval(Double(index)))
        }
        return machine
    }

    /// Windows moved by a step of the wall clock are undone to where they were, and a memo of
    /// the windows before the move is not trusted once the caller says they may have moved.
    @Test func windowsMovedByAClockStepAreUndoneAndForgotten() throws {
        var machine = try Self.machine(pending: 4)
        let before = machine.state.pending
        let memoBefore = machine.memo
        machine.keepPendingUndo()
        machine.movePendingTimes(by: 3_600)
        #expect(machine.nextDeadline == before.compactMap(\.deadline).min()!.addingTimeInterval(3_600))
        let undo = try #require(machine.pendingUndo)
        #expect(undo.changed(machine.state.pending))
        #expect(undo.undo(machine.state.pending) == before)
        // Same count and seqs: only the caller knows the windows moved; told so, the walk decides.
        var again = SyncStateMachine(state: machine.state, isSynchronizerRegistered: true)
        again.memo = memoBefore.forgettingWindows
        #expect(again.knowNextDeadline() == machine.state.pending.compactMap(\.deadline).min())
    }

    /// A memo of other batches (another count, or other first and last seqs) says nothing of
    /// this machine's windows.
    @Test func aMemoOfOtherBatchesIsNotUsedForTheWindows() throws {
        let three = try Self.machine(pending: 3)
        var five = try Self.machine(pending: 5)
        five.movePendingTimes(by: -100)
        var given = SyncStateMachine(state: five.state, isSynchronizerRegistered: true)
        given.memo = three.memo
        #expect(given.knowNextDeadline() == five.state.pending.compactMap(\.deadline).min())
    }

    /// An input that only appends is undone by dropping what follows, and says it changed
    /// them; one that changes nothing says so.
    @Test func appendsAreUndoneByDroppingWhatFollows() throws {
        var machine = try Self.machine(pending: 2)
        let before = machine.state.pending
        machine.keepPendingUndo()
        _ = try machine.receive(.basketDelta([RetailerProduct(id: "n", quantity: 2)]), source: "n", at: Self.start.addingTimeInterval(5))
        let undo = try #require(machine.pendingUndo)
        #expect(undo.rewritten == nil, "an append keeps no copy")
        #expect(undo.changed(machine.state.pending))
        #expect(undo.undo(machine.state.pending) == before)
        machine.keepPendingUndo()
        _ = machine.expireWindows(at: Self.start.addingTimeInterval(6))
        #expect(machine.pendingUndo?.changed(machine.state.pending) == false, "no window was over: nothing changed")
    }
}
