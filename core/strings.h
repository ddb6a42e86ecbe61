#pragma once
// Small string helpers shared by the codecs. Pure, allocation-light.
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami {

// Splits on `sep`, keeping empty pieces ("a,,b" -> {"a","","b"}; "" -> {""}).
std::vector<std::string_view> Split(std::string_view s, char sep);
std::string_view Trim(std::string_view s);
std::string ToLower(std::string_view s);
std::string ToUpper(std::string_view s);
bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// Strict decimal integer parse (optional leading '-' or '+', no spaces); errors name `field` and `input`.
Result<std::int64_t> ParseInt64(std::string_view input, std::string_view field);
// Integer parse that also checks [lo, hi].
Result<std::int64_t> ParseIntInRange(std::string_view input, std::string_view field, std::int64_t lo,
                                     std::int64_t hi);
// Go strconv.ParseBool: 1,t,T,TRUE,true,True,0,f,F,FALSE,false,False.
Result<bool> ParseGoBool(std::string_view input, std::string_view field);

std::string Join(const std::vector<std::string>& parts, std::string_view sep);
// What an exception says: its what(), "a non-standard exception" for one that is no std::exception, "" for
// none. The one place a task's or a loop's escaped exception is turned into words.
std::string ExceptionMessage(const std::exception_ptr& e);

// A Kubernetes label value: empty, or at most 63 of [A-Za-z0-9_.-] starting and ending alphanumeric.
bool IsLabelValue(std::string_view s);

// Lowercase without '_' and '-': "http_bind", "HttpBind" and "http-bind" fold to the same name.
std::string FoldName(std::string_view s);
// Levenshtein distance.
std::size_t EditDistance(std::string_view a, std::string_view b);
// Whether `typed` was probably meant as `known`: the same folded name, or one edit away (two for names of
// 8+).
bool LooksLikeName(std::string_view typed, std::string_view known);

}  // namespace hami
