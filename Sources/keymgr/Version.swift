/// keymgr's version, printed by `keymgr --version`. The one place it is set: change it here for a release.
enum KeymgrVersion {
    /// A semantic version, `MAJOR.MINOR.PATCH`.
    static let current = "0.1.0"
}
