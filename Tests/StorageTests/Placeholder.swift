import XCTest

final class PlaceholderStorageTests: XCTestCase {}
