"""The table of every function the scheduler's DRA CEL environment declares, one overload a line.

Read by ``decls.py`` (:data:`TABLE`, parsed into its ``FUNCTIONS``); see there for what the table
covers and where it was read from (the environment ``e2e/cmd/celdiff`` builds). Data only.
"""

# function | overload id | g(lobal) or m(ember) | argument types | result | type parameters
TABLE = """\
!_|logical_not|g|bool|bool|
-_|negate_double|g|double|double|
-_|negate_int64|g|int|int|
@in|in_list|g|<A>, list(<A>)|bool|A
@in|in_map|g|<A>, map(<A>, <B>)|bool|B A
@not_strictly_false|not_strictly_false|g|bool|bool|
@sortByAssociatedKeys|list_int_sortByAssociatedKeys|m|list(<T>), list(int)|list(<T>)|T
@sortByAssociatedKeys|list_uint_sortByAssociatedKeys|m|list(<T>), list(uint)|list(<T>)|T
@sortByAssociatedKeys|list_double_sortByAssociatedKeys|m|list(<T>), list(double)|list(<T>)|T
@sortByAssociatedKeys|list_bool_sortByAssociatedKeys|m|list(<T>), list(bool)|list(<T>)|T
@sortByAssociatedKeys|list_google.protobuf.Duration_sortByAssociatedKeys|m|list(<T>), list(google.protobuf.Duration)|list(<T>)|T
@sortByAssociatedKeys|list_google.protobuf.Timestamp_sortByAssociatedKeys|m|list(<T>), list(google.protobuf.Timestamp)|list(<T>)|T
@sortByAssociatedKeys|list_string_sortByAssociatedKeys|m|list(<T>), list(string)|list(<T>)|T
@sortByAssociatedKeys|list_bytes_sortByAssociatedKeys|m|list(<T>), list(bytes)|list(<T>)|T
_!=_|not_equals|g|<A>, <A>|bool|A
_%_|modulo_int64|g|int, int|int|
_%_|modulo_uint64|g|uint, uint|uint|
_&&_|logical_and|g|bool, bool|bool|
_*_|multiply_double|g|double, double|double|
_*_|multiply_int64|g|int, int|int|
_*_|multiply_uint64|g|uint, uint|uint|
_+_|add_bytes|g|bytes, bytes|bytes|
_+_|add_double|g|double, double|double|
_+_|add_duration_duration|g|google.protobuf.Duration, google.protobuf.Duration|google.protobuf.Duration|
_+_|add_duration_timestamp|g|google.protobuf.Duration, google.protobuf.Timestamp|google.protobuf.Timestamp|
_+_|add_timestamp_duration|g|google.protobuf.Timestamp, google.protobuf.Duration|google.protobuf.Timestamp|
_+_|add_int64|g|int, int|int|
_+_|add_list|g|list(<A>), list(<A>)|list(<A>)|A
_+_|add_string|g|string, string|string|
_+_|add_uint64|g|uint, uint|uint|
_-_|subtract_double|g|double, double|double|
_-_|subtract_duration_duration|g|google.protobuf.Duration, google.protobuf.Duration|google.protobuf.Duration|
_-_|subtract_int64|g|int, int|int|
_-_|subtract_timestamp_duration|g|google.protobuf.Timestamp, google.protobuf.Duration|google.protobuf.Timestamp|
_-_|subtract_timestamp_timestamp|g|google.protobuf.Timestamp, google.protobuf.Timestamp|google.protobuf.Duration|
_-_|subtract_uint64|g|uint, uint|uint|
_/_|divide_double|g|double, double|double|
_/_|divide_int64|g|int, int|int|
_/_|divide_uint64|g|uint, uint|uint|
_<=_|less_equals_bool|g|bool, bool|bool|
_<=_|less_equals_int64|g|int, int|bool|
_<=_|less_equals_int64_double|g|int, double|bool|
_<=_|less_equals_int64_uint64|g|int, uint|bool|
_<=_|less_equals_uint64|g|uint, uint|bool|
_<=_|less_equals_uint64_double|g|uint, double|bool|
_<=_|less_equals_uint64_int64|g|uint, int|bool|
_<=_|less_equals_double|g|double, double|bool|
_<=_|less_equals_double_int64|g|double, int|bool|
_<=_|less_equals_double_uint64|g|double, uint|bool|
_<=_|less_equals_string|g|string, string|bool|
_<=_|less_equals_bytes|g|bytes, bytes|bool|
_<=_|less_equals_timestamp|g|google.protobuf.Timestamp, google.protobuf.Timestamp|bool|
_<=_|less_equals_duration|g|google.protobuf.Duration, google.protobuf.Duration|bool|
_<_|less_bool|g|bool, bool|bool|
_<_|less_int64|g|int, int|bool|
_<_|less_int64_double|g|int, double|bool|
_<_|less_int64_uint64|g|int, uint|bool|
_<_|less_uint64|g|uint, uint|bool|
_<_|less_uint64_double|g|uint, double|bool|
_<_|less_uint64_int64|g|uint, int|bool|
_<_|less_double|g|double, double|bool|
_<_|less_double_int64|g|double, int|bool|
_<_|less_double_uint64|g|double, uint|bool|
_<_|less_string|g|string, string|bool|
_<_|less_bytes|g|bytes, bytes|bool|
_<_|less_timestamp|g|google.protobuf.Timestamp, google.protobuf.Timestamp|bool|
_<_|less_duration|g|google.protobuf.Duration, google.protobuf.Duration|bool|
_==_|equals|g|<A>, <A>|bool|A
_>=_|greater_equals_bool|g|bool, bool|bool|
_>=_|greater_equals_int64|g|int, int|bool|
_>=_|greater_equals_int64_double|g|int, double|bool|
_>=_|greater_equals_int64_uint64|g|int, uint|bool|
_>=_|greater_equals_uint64|g|uint, uint|bool|
_>=_|greater_equals_uint64_double|g|uint, double|bool|
_>=_|greater_equals_uint64_int64|g|uint, int|bool|
_>=_|greater_equals_double|g|double, double|bool|
_>=_|greater_equals_double_int64|g|double, int|bool|
_>=_|greater_equals_double_uint64|g|double, uint|bool|
_>=_|greater_equals_string|g|string, string|bool|
_>=_|greater_equals_bytes|g|bytes, bytes|bool|
_>=_|greater_equals_timestamp|g|google.protobuf.Timestamp, google.protobuf.Timestamp|bool|
_>=_|greater_equals_duration|g|google.protobuf.Duration, google.protobuf.Duration|bool|
_>_|greater_bool|g|bool, bool|bool|
_>_|greater_int64|g|int, int|bool|
_>_|greater_int64_double|g|int, double|bool|
_>_|greater_int64_uint64|g|int, uint|bool|
_>_|greater_uint64|g|uint, uint|bool|
_>_|greater_uint64_double|g|uint, double|bool|
_>_|greater_uint64_int64|g|uint, int|bool|
_>_|greater_double|g|double, double|bool|
_>_|greater_double_int64|g|double, int|bool|
_>_|greater_double_uint64|g|double, uint|bool|
_>_|greater_string|g|string, string|bool|
_>_|greater_bytes|g|bytes, bytes|bool|
_>_|greater_timestamp|g|google.protobuf.Timestamp, google.protobuf.Timestamp|bool|
_>_|greater_duration|g|google.protobuf.Duration, google.protobuf.Duration|bool|
_?._|select_optional_field|g|dyn, string|optional_type(<V>)|V
_?_:_|conditional|g|bool, <A>, <A>|<A>|A
_[?_]|list_optindex_optional_int|g|list(<V>), int|optional_type(<V>)|V
_[?_]|optional_list_optindex_optional_int|g|optional_type(list(<V>)), int|optional_type(<V>)|V
_[?_]|map_optindex_optional_value|g|map(<K>, <V>), <K>|optional_type(<V>)|V K
_[?_]|optional_map_optindex_optional_value|g|optional_type(map(<K>, <V>)), <K>|optional_type(<V>)|V K
_[_]|index_list|g|list(<A>), int|<A>|A
_[_]|index_map|g|map(<A>, <B>), <A>|<B>|A B
_[_]|optional_list_index_int|g|optional_type(list(<V>)), int|optional_type(<V>)|V
_[_]|optional_map_index_value|g|optional_type(map(<K>, <V>)), <K>|optional_type(<V>)|V K
_||_|logical_or|g|bool, bool|bool|
add|quantity_add|m|kubernetes.Quantity, kubernetes.Quantity|kubernetes.Quantity|
add|quantity_add_int|m|kubernetes.Quantity, int|kubernetes.Quantity|
allowed|decision_allowed|m|kubernetes.authorization.Decision|bool|
asApproximateFloat|quantity_get_float|m|kubernetes.Quantity|double|
asInteger|quantity_get_int|m|kubernetes.Quantity|int|
bool|bool_to_bool|g|bool|bool|
bool|string_to_bool|g|string|bool|
bytes|bytes_to_bytes|g|bytes|bytes|
bytes|string_to_bytes|g|string|bytes|
cel.@mapInsert|@mapInsert_map_key_value|g|map(<K>, <V>), <K>, <V>|map(<K>, <V>)|K V
cel.@mapInsert|@mapInsert_map_map|g|map(<K>, <V>), map(<K>, <V>)|map(<K>, <V>)|K V
charAt|string_char_at_int|m|string, int|string|
check|pathcheck_check|m|kubernetes.authorization.PathCheck, string|kubernetes.authorization.Decision|
check|resourcecheck_check|m|kubernetes.authorization.ResourceCheck, string|kubernetes.authorization.Decision|
cidr|string_to_cidr|g|string|net.CIDR|
compareTo|quantity_compare_to|m|kubernetes.Quantity, kubernetes.Quantity|int|
compareTo|semver_compare_to|m|kubernetes.Semver, kubernetes.Semver|int|
contains|contains_string|m|string, string|bool|
containsCIDR|cidr_contains_cidr_string|m|net.CIDR, string|bool|
containsCIDR|cidr_contains_cidr|m|net.CIDR, net.CIDR|bool|
containsIP|cidr_contains_ip_string|m|net.CIDR, string|bool|
containsIP|cidr_contains_ip_ip|m|net.CIDR, net.IP|bool|
distinct|list_distinct|m|list(<T>)|list(<T>)|T
double|double_to_double|g|double|double|
double|int64_to_double|g|int|double|
double|string_to_double|g|string|double|
double|uint64_to_double|g|uint|double|
duration|duration_to_duration|g|google.protobuf.Duration|google.protobuf.Duration|
duration|int64_to_duration|g|int|google.protobuf.Duration|
duration|string_to_duration|g|string|google.protobuf.Duration|
dyn|to_dyn|g|<A>|dyn|A
endsWith|ends_with_string|m|string, string|bool|
error|decision_error|m|kubernetes.authorization.Decision|string|
errored|decision_errored|m|kubernetes.authorization.Decision|bool|
family|ip_family|m|net.IP|int|
fieldSelector|authorizer_fieldselector|m|kubernetes.authorization.ResourceCheck, string|kubernetes.authorization.ResourceCheck|
find|string_find_string|m|string, string|string|
findAll|string_find_all_string|m|string, string|list(string)|
findAll|string_find_all_string_int|m|string, string, int|list(string)|
first|list_first|m|list(<V>)|optional_type(<V>)|V
flatten|list_flatten|m|list(list(<T>))|list(<T>)|T
flatten|list_flatten_int|m|list(dyn), int|list(dyn)|
format|string_format|m|string, list(dyn)|string|
format.byte|format.byte|g||kubernetes.NamedFormat|
format.date|format.date|g||kubernetes.NamedFormat|
format.datetime|format.datetime|g||kubernetes.NamedFormat|
format.dns1035Label|format.dns1035Label|g||kubernetes.NamedFormat|
format.dns1035LabelPrefix|format.dns1035LabelPrefix|g||kubernetes.NamedFormat|
format.dns1123Label|format.dns1123Label|g||kubernetes.NamedFormat|
format.dns1123LabelPrefix|format.dns1123LabelPrefix|g||kubernetes.NamedFormat|
format.dns1123Subdomain|format.dns1123Subdomain|g||kubernetes.NamedFormat|
format.dns1123SubdomainPrefix|format.dns1123SubdomainPrefix|g||kubernetes.NamedFormat|
format.labelValue|format.labelValue|g||kubernetes.NamedFormat|
format.named|format-named|g|string|optional_type(kubernetes.NamedFormat)|
format.qualifiedName|format.qualifiedName|g||kubernetes.NamedFormat|
format.uri|format.uri|g||kubernetes.NamedFormat|
format.uuid|format.uuid|g||kubernetes.NamedFormat|
getDate|timestamp_to_day_of_month_1_based|m|google.protobuf.Timestamp|int|
getDate|timestamp_to_day_of_month_1_based_with_tz|m|google.protobuf.Timestamp, string|int|
getDayOfMonth|timestamp_to_day_of_month|m|google.protobuf.Timestamp|int|
getDayOfMonth|timestamp_to_day_of_month_with_tz|m|google.protobuf.Timestamp, string|int|
getDayOfWeek|timestamp_to_day_of_week|m|google.protobuf.Timestamp|int|
getDayOfWeek|timestamp_to_day_of_week_with_tz|m|google.protobuf.Timestamp, string|int|
getDayOfYear|timestamp_to_day_of_year|m|google.protobuf.Timestamp|int|
getDayOfYear|timestamp_to_day_of_year_with_tz|m|google.protobuf.Timestamp, string|int|
getEscapedPath|url_get_escaped_path|m|kubernetes.URL|string|
getFullYear|timestamp_to_year|m|google.protobuf.Timestamp|int|
getFullYear|timestamp_to_year_with_tz|m|google.protobuf.Timestamp, string|int|
getHost|url_get_host|m|kubernetes.URL|string|
getHostname|url_get_hostname|m|kubernetes.URL|string|
getHours|timestamp_to_hours|m|google.protobuf.Timestamp|int|
getHours|timestamp_to_hours_with_tz|m|google.protobuf.Timestamp, string|int|
getHours|duration_to_hours|m|google.protobuf.Duration|int|
getMilliseconds|timestamp_to_milliseconds|m|google.protobuf.Timestamp|int|
getMilliseconds|timestamp_to_milliseconds_with_tz|m|google.protobuf.Timestamp, string|int|
getMilliseconds|duration_to_milliseconds|m|google.protobuf.Duration|int|
getMinutes|timestamp_to_minutes|m|google.protobuf.Timestamp|int|
getMinutes|timestamp_to_minutes_with_tz|m|google.protobuf.Timestamp, string|int|
getMinutes|duration_to_minutes|m|google.protobuf.Duration|int|
getMonth|timestamp_to_month|m|google.protobuf.Timestamp|int|
getMonth|timestamp_to_month_with_tz|m|google.protobuf.Timestamp, string|int|
getPort|url_get_port|m|kubernetes.URL|string|
getQuery|url_get_query|m|kubernetes.URL|map(string, list(string))|
getScheme|url_get_scheme|m|kubernetes.URL|string|
getSeconds|timestamp_to_seconds|m|google.protobuf.Timestamp|int|
getSeconds|timestamp_to_seconds_tz|m|google.protobuf.Timestamp, string|int|
getSeconds|duration_to_seconds|m|google.protobuf.Duration|int|
group|authorizer_group|m|kubernetes.authorization.Authorizer, string|kubernetes.authorization.GroupCheck|
hasValue|optional_hasValue|m|optional_type(<V>)|bool|V
includes|dra_includes_dyn_dyn|m|dyn, dyn|bool|
indexOf|list_a_index_of_int|m|list(<A>), <A>|int|A
indexOf|string_index_of_string|m|string, string|int|
indexOf|string_index_of_string_int|m|string, string, int|int|
int|int64_to_int64|g|int|int|
int|double_to_int64|g|double|int|
int|duration_to_int64|g|google.protobuf.Duration|int|
int|string_to_int64|g|string|int|
int|timestamp_to_int64|g|google.protobuf.Timestamp|int|
int|uint64_to_int64|g|uint|int|
ip|string_to_ip|g|string|net.IP|
ip|cidr_ip|m|net.CIDR|net.IP|
ip.isCanonical|ip_is_canonical|g|string|bool|
isCIDR|is_cidr|g|string|bool|
isGlobalUnicast|ip_is_global_unicast|m|net.IP|bool|
isGreaterThan|quantity_is_greater_than|m|kubernetes.Quantity, kubernetes.Quantity|bool|
isGreaterThan|semver_is_greater_than|m|kubernetes.Semver, kubernetes.Semver|bool|
isIP|is_ip|g|string|bool|
isInteger|quantity_is_integer|m|kubernetes.Quantity|bool|
isLessThan|quantity_is_less_than|m|kubernetes.Quantity, kubernetes.Quantity|bool|
isLessThan|semver_is_less_than|m|kubernetes.Semver, kubernetes.Semver|bool|
isLinkLocalMulticast|ip_is_link_local_multicast|m|net.IP|bool|
isLinkLocalUnicast|ip_is_link_local_unicast|m|net.IP|bool|
isLoopback|ip_is_loopback|m|net.IP|bool|
isQuantity|is_quantity_string|g|string|bool|
isSemver|is_semver_string|g|string|bool|
isSemver|is_semver_string_bool|g|string, bool|bool|
isSorted|list_int_is_sorted_bool|m|list(int)|bool|
isSorted|list_uint_is_sorted_bool|m|list(uint)|bool|
isSorted|list_double_is_sorted_bool|m|list(double)|bool|
isSorted|list_bool_is_sorted_bool|m|list(bool)|bool|
isSorted|list_duration_is_sorted_bool|m|list(google.protobuf.Duration)|bool|
isSorted|list_timestamp_is_sorted_bool|m|list(google.protobuf.Timestamp)|bool|
isSorted|list_string_is_sorted_bool|m|list(string)|bool|
isSorted|list_bytes_is_sorted_bool|m|list(bytes)|bool|
isURL|is_url_string|g|string|bool|
isUnspecified|ip_is_unspecified|m|net.IP|bool|
join|list_join|m|list(string)|string|
join|list_join_string|m|list(string), string|string|
labelSelector|authorizer_labelselector|m|kubernetes.authorization.ResourceCheck, string|kubernetes.authorization.ResourceCheck|
last|list_last|m|list(<V>)|optional_type(<V>)|V
lastIndexOf|list_a_last_index_of_int|m|list(<A>), <A>|int|A
lastIndexOf|string_last_index_of_string|m|string, string|int|
lastIndexOf|string_last_index_of_string_int|m|string, string, int|int|
lists.range|lists_range|g|int|list(int)|
lowerAscii|string_lower_ascii|m|string|string|
major|semver_major|m|kubernetes.Semver|int|
masked|cidr_masked|m|net.CIDR|net.CIDR|
matches|matches|g|string, string|bool|
matches|matches_string|m|string, string|bool|
max|list_int_max_int|m|list(int)|int|
max|list_uint_max_uint|m|list(uint)|uint|
max|list_double_max_double|m|list(double)|double|
max|list_bool_max_bool|m|list(bool)|bool|
max|list_duration_max_duration|m|list(google.protobuf.Duration)|google.protobuf.Duration|
max|list_timestamp_max_timestamp|m|list(google.protobuf.Timestamp)|google.protobuf.Timestamp|
max|list_string_max_string|m|list(string)|string|
max|list_bytes_max_bytes|m|list(bytes)|bytes|
min|list_int_min_int|m|list(int)|int|
min|list_uint_min_uint|m|list(uint)|uint|
min|list_double_min_double|m|list(double)|double|
min|list_bool_min_bool|m|list(bool)|bool|
min|list_duration_min_duration|m|list(google.protobuf.Duration)|google.protobuf.Duration|
min|list_timestamp_min_timestamp|m|list(google.protobuf.Timestamp)|google.protobuf.Timestamp|
min|list_string_min_string|m|list(string)|string|
min|list_bytes_min_bytes|m|list(bytes)|bytes|
minor|semver_minor|m|kubernetes.Semver|int|
name|resourcecheck_name|m|kubernetes.authorization.ResourceCheck, string|kubernetes.authorization.ResourceCheck|
namespace|resourcecheck_namespace|m|kubernetes.authorization.ResourceCheck, string|kubernetes.authorization.ResourceCheck|
optional.none|optional_none|g||optional_type(<V>)|V
optional.of|optional_of|g|<V>|optional_type(<V>)|V
optional.ofNonZeroValue|optional_ofNonZeroValue|g|<V>|optional_type(<V>)|V
optional.unwrap|optional_unwrap|g|list(optional_type(<V>))|list(<V>)|V
or|optional_or_optional|m|optional_type(<V>), optional_type(<V>)|optional_type(<V>)|V
orValue|optional_orValue_value|m|optional_type(<V>), <V>|<V>|V
patch|semver_patch|m|kubernetes.Semver|int|
path|authorizer_path|m|kubernetes.authorization.Authorizer, string|kubernetes.authorization.PathCheck|
prefixLength|cidr_prefix_length|m|net.CIDR|int|
quantity|string_to_quantity|g|string|kubernetes.Quantity|
reason|decision_reason|m|kubernetes.authorization.Decision|string|
replace|string_replace_string_string|m|string, string, string|string|
replace|string_replace_string_string_int|m|string, string, string, int|string|
resource|groupcheck_resource|m|kubernetes.authorization.GroupCheck, string|kubernetes.authorization.ResourceCheck|
reverse|list_reverse|m|list(<T>)|list(<T>)|T
semver|string_to_semver|g|string|kubernetes.Semver|
semver|string_bool_to_semver|g|string, bool|kubernetes.Semver|
serviceAccount|authorizer_serviceaccount|m|kubernetes.authorization.Authorizer,string,string|kubernetes.authorization.Authorizer|
sets.contains|list_sets_contains_list|g|list(<T>), list(<T>)|bool|T
sets.equivalent|list_sets_equivalent_list|g|list(<T>), list(<T>)|bool|T
sets.intersects|list_sets_intersects_list|g|list(<T>), list(<T>)|bool|T
sign|quantity_sign|g|kubernetes.Quantity|int|
size|size_bytes|g|bytes|int|
size|bytes_size|m|bytes|int|
size|size_list|g|list(<A>)|int|A
size|list_size|m|list(<A>)|int|A
size|size_map|g|map(<A>, <B>)|int|A B
size|map_size|m|map(<A>, <B>)|int|A B
size|size_string|g|string|int|
size|string_size|m|string|int|
slice|list_slice|m|list(<T>), int, int|list(<T>)|T
sort|list_int_sort|m|list(int)|list(int)|
sort|list_uint_sort|m|list(uint)|list(uint)|
sort|list_double_sort|m|list(double)|list(double)|
sort|list_bool_sort|m|list(bool)|list(bool)|
sort|list_google.protobuf.Duration_sort|m|list(google.protobuf.Duration)|list(google.protobuf.Duration)|
sort|list_google.protobuf.Timestamp_sort|m|list(google.protobuf.Timestamp)|list(google.protobuf.Timestamp)|
sort|list_string_sort|m|list(string)|list(string)|
sort|list_bytes_sort|m|list(bytes)|list(bytes)|
split|string_split_string|m|string, string|list(string)|
split|string_split_string_int|m|string, string, int|list(string)|
startsWith|starts_with_string|m|string, string|bool|
string|string_to_string|g|string|string|
string|bool_to_string|g|bool|string|
string|bytes_to_string|g|bytes|string|
string|double_to_string|g|double|string|
string|duration_to_string|g|google.protobuf.Duration|string|
string|int64_to_string|g|int|string|
string|timestamp_to_string|g|google.protobuf.Timestamp|string|
string|uint64_to_string|g|uint|string|
string|ip_to_string|g|net.IP|string|
string|cidr_to_string|g|net.CIDR|string|
strings.quote|strings_quote|g|string|string|
sub|quantity_sub|m|kubernetes.Quantity, kubernetes.Quantity|kubernetes.Quantity|
sub|quantity_sub_int|m|kubernetes.Quantity, int|kubernetes.Quantity|
subresource|resourcecheck_subresource|m|kubernetes.authorization.ResourceCheck, string|kubernetes.authorization.ResourceCheck|
substring|string_substring_int|m|string, int|string|
substring|string_substring_int_int|m|string, int, int|string|
sum|list_int_sum_int|m|list(int)|int|
sum|list_uint_sum_uint|m|list(uint)|uint|
sum|list_double_sum_double|m|list(double)|double|
sum|list_duration_sum_duration|m|list(google.protobuf.Duration)|google.protobuf.Duration|
timestamp|timestamp_to_timestamp|g|google.protobuf.Timestamp|google.protobuf.Timestamp|
timestamp|int64_to_timestamp|g|int|google.protobuf.Timestamp|
timestamp|string_to_timestamp|g|string|google.protobuf.Timestamp|
trim|string_trim|m|string|string|
type|type|g|<A>|type(<A>)|A
uint|uint64_to_uint64|g|uint|uint|
uint|double_to_uint64|g|double|uint|
uint|int64_to_uint64|g|int|uint|
uint|string_to_uint64|g|string|uint|
unwrapOpt|optional_unwrapOpt|m|list(optional_type(<V>))|list(<V>)|V
upperAscii|string_upper_ascii|m|string|string|
url|string_to_url|g|string|kubernetes.URL|
validate|format-validate|m|kubernetes.NamedFormat, string|optional_type(list(string))|
value|optional_value|m|optional_type(<V>)|<V>|V
"""
