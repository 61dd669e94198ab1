/// Errors of the Storage layer: a code callers can act on and a message a person can act on.
package struct StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of storage failure this is.
    package enum Code: String, Sendable {
        /// The home directory or database file is unsafe (another OS user could write it).
        case insecureHome
        /// There is no store in the home yet.
        case notInitialized
        /// The database was written by a newer keymgr.
        case newerSchema
        /// The database is locked by another process past the busy timeout.
        case busy
        /// A row that must exist does not.
        case notFound
        /// A uniqueness or integrity rule of the schema refused the change.
        case conflict
        /// The file is not a keymgr database (not SQLite, or another program's SQLite file).
        case notAStore
        /// A row does not hold what keymgr wrote: a value no keymgr writes, or a broken keyed audit chain.
        case tampered
        /// Anything else SQLite or the file system reported.
        case failure
    }

    /// What kind of failure this is.
    package let code: Code
    /// What went wrong and what to do next.
    package let message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { message }
}
