import Foundation
import GRDB
import KeyManager
@testable import Storage
import XCTest

/// The writers' queue (`keymgr.db-lock`): every write transaction holds an exclusive `flock` on it; readers never do.
/// The holders here are real: this process's own descriptor, or a shell process holding the lock with flock(1).
final class WriterQueueTests: StorageTestCase {
    var lockPath: String { home.writerLockURL.path }

    /// Takes the writers' queue the way another keymgr would, on a descriptor of this test's own.
    func holdQueue() throws -> Int32 {
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(descriptor, 0, "open \(lockPath)")
        XCTAssertEqual(flock(descriptor, LOCK_EX | LOCK_NB), 0, "the queue was free")
        return descriptor
    }

    /// Whether another open file description could take the lock now.
    func queueIsFree() -> Bool {
        let descriptor = open(lockPath, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return flock(descriptor, LOCK_EX | LOCK_NB) == 0
    }

    func testWriteMakesThePrivateLockFileAndHoldsItOnlyDuringTheTransaction() throws {
        let store = try openStore()
        try store.write { writer in
            try writer.upsertUser(userId: "alice", username: nil, at: Date())
            XCTAssertFalse(self.queueIsFree(), "the queue is held inside the write transaction")
        }
        XCTAssertEqual(mode(lockPath), 0o600)
        XCTAssertTrue(queueIsFree(), "let go after the commit")

        XCTAssertThrowsError(try store.write { (_: StoreWriter) -> Void in throw StorageError(.conflict, "refused") })
        XCTAssertTrue(queueIsFree(), "let go after a rollback")
    }

    func testWriterGivesUpWithBusyWhenTheQueueIsHeldTooLong() throws {
        let store = try openStore()
        let held = try holdQueue()
        defer { close(held) }
        XCTAssertThrowsError(try store.write { try $0.upsertUser(userId: "bob", username: nil, at: Date()) }) { error in
            let failure = error as? StorageError
            XCTAssertEqual(failure?.code, .busy, "\(error)")
            XCTAssertTrue(failure?.message.contains("keymgr.db-lock") ?? false, "names the lock: \(error)")
            XCTAssertTrue(failure?.message.contains("try again") ?? false, "says what to do: \(error)")
        }
        XCTAssertNil(try store.read { try $0.user(id: "bob") }, "nothing was written")
        close(held)
        try store.write { try $0.upsertUser(userId: "bob", username: nil, at: Date()) }
        XCTAssertNotNil(try store.read { try $0.user(id: "bob") })
    }

    func testReadersProceedWhileAWriterHoldsTheQueue() throws {
        let store = try openStore()
        try store.write { try $0.upsertUser(userId: "alice", username: nil, at: Date()) }
        let reader = try Store.open(home: home, access: .readOnly, digest: SHA256.hash)
        // Inside a write transaction: the queue and SQLite's write lock are both held by this writer.
        try store.write { writer in
            try writer.upsertUser(userId: "carol", username: nil, at: Date())
            XCTAssertFalse(self.queueIsFree())
            XCTAssertNotNil(try reader.read { try $0.user(id: "alice") }, "a reader sees the last commit")
            XCTAssertNil(try reader.read { try $0.user(id: "carol") }, "and not the open transaction")
        }
        XCTAssertNotNil(try reader.read { try $0.user(id: "carol") })
    }

    func testKilledHolderDoesNotBlockTheNextWriter() throws {
        let store = try openStore()
        // A shell that takes the lock with flock(1) on its own descriptor 9, then becomes `sleep` (same process,
        // descriptor kept), so killing it is killing the holder.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/bin/sh")
        holder.arguments = ["-c", #"exec 9>>"$0" && flock 9 && echo held && exec sleep 600"#, lockPath]
        let output = Pipe()
        holder.standardOutput = output
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) } }
        let said = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        XCTAssertTrue(said.contains("held"), "the shell took the lock: \(said)")
        XCTAssertFalse(queueIsFree(), "another process holds the queue")

        XCTAssertEqual(kill(holder.processIdentifier, SIGKILL), 0)
        holder.waitUntilExit()
        try store.write { try $0.upsertUser(userId: "dave", username: nil, at: Date()) }
        XCTAssertNotNil(try store.read { try $0.user(id: "dave") })
    }
}
