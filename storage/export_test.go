package storage

// CheckConditionForTest is what the Store checks of a condition.
var CheckConditionForTest = checkCondition

// CheckKeyForTest is what the Store checks of a key.
var CheckKeyForTest = checkKey
