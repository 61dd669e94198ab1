import GRDB
import XCTest
@testable import Storage

/// GRDB's authorizer behind keymgr's filter (CSQLiteOptions, keymgr_sqlite_authorizer.c): column reads are answered
/// without calling GRDB, every other action still reaches it.
final class AuthorizerTests: XCTestCase {
    /// The reads of a statement no longer reach GRDB: its selected region, which only observation reads, is empty.
    /// (Without the filter it is `t(a,b)`.)
    func testColumnReadsAreNotTrackedByGRDB() throws {
        let queue = try DatabaseQueue()
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE t (a INTEGER, b TEXT)")
            let statement = try db.makeStatement(sql: "SELECT a, b FROM t")
            XCTAssertTrue(statement.databaseRegion.isEmpty, "\(statement.databaseRegion)")
            XCTAssertEqual(try Row.fetchAll(db, sql: "SELECT a, b FROM t").count, 0)
        }
    }

    /// A schema change still reaches GRDB, which then forgets the columns it had cached.
    func testSchemaChangesStillInvalidateGRDBsSchemaCache() throws {
        let queue = try DatabaseQueue()
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE t (a INTEGER, b TEXT)")
            XCTAssertEqual(try db.columns(in: "t").map(\.name), ["a", "b"])
            try db.execute(sql: "ALTER TABLE t ADD COLUMN c BLOB")
            XCTAssertEqual(try db.columns(in: "t").map(\.name), ["a", "b", "c"])
        }
    }

    /// Transactions and savepoints, which GRDB follows through the authorizer, still commit and roll back as asked;
    /// a read is still read-only (PRAGMA query_only, which GRDB also follows through it).
    func testTransactionsSavepointsAndReadOnlyReadsStillWork() throws {
        let queue = try DatabaseQueue()
        try queue.write { db in try db.execute(sql: "CREATE TABLE t (a INTEGER)") }
        try queue.inTransaction { db in
            try db.execute(sql: "INSERT INTO t (a) VALUES (1)")
            try db.inSavepoint {
                try db.execute(sql: "INSERT INTO t (a) VALUES (2)")
                return .rollback
            }
            XCTAssertTrue(db.isInsideTransaction)
            return .commit
        }
        XCTAssertEqual(try queue.read { try Int.fetchAll($0, sql: "SELECT a FROM t") }, [1])
        XCTAssertThrowsError(try queue.read { try $0.execute(sql: "INSERT INTO t (a) VALUES (3)") })
        XCTAssertEqual(try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") }, 1)
    }
}
