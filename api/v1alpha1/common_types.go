package v1alpha1

// CIDR is an IP prefix in canonical form, such as 10.244.1.0/24.
// +kubebuilder:validation:MinLength=9
// +kubebuilder:validation:MaxLength=43
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.244.1.0/24",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="must be a CIDR in canonical form: the address has host bits set (use the network address, such as 10.244.1.0/24)",reason=FieldValueInvalid
type CIDR string

// IPAddress is an IPv4 or IPv6 address, such as 10.0.0.4.
// +kubebuilder:validation:MinLength=2
// +kubebuilder:validation:MaxLength=39
// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address such as 10.0.0.4",reason=FieldValueInvalid
type IPAddress string

// IPv4Address is an IPv4 address, such as 10.0.0.4. Its maximum length is an IPv6 address's, so that an
// IPv6 address (a dual-stack cluster's) is refused by the rule, saying that it must be IPv4, rather than as
// too long.
// +kubebuilder:validation:MinLength=7
// +kubebuilder:validation:MaxLength=39
// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address such as 10.0.0.4",reason=FieldValueInvalid
type IPv4Address string

// InterfaceAddress is an address with its prefix length, as a CNI result carries it, such as
// 10.244.1.5/24.
// +kubebuilder:validation:MinLength=9
// +kubebuilder:validation:MaxLength=43
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be an address with its prefix length, such as 10.244.1.5/24",reason=FieldValueInvalid
type InterfaceAddress string

// MACAddress is a unicast Ethernet address in lower-case colon notation, such as 02:42:ac:11:00:02.
// +kubebuilder:validation:MinLength=17
// +kubebuilder:validation:MaxLength=17
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9a-f]{2}:){5}[0-9a-f]{2}$')",message="must be a MAC address in lower-case colon notation, such as 02:42:ac:11:00:02",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.size() < 2 || !(self.charAt(1) in ['1','3','5','7','9','b','d','f'])",message="must be a unicast MAC address: the lowest bit of the first octet is the multicast bit",reason=FieldValueInvalid
type MACAddress string

// VNI is a VXLAN or Geneve virtual network identifier (24 bits, 0 is reserved).
// +kubebuilder:validation:Minimum=1
// +kubebuilder:validation:Maximum=16777215
type VNI int32

// InterfaceName is the name of an OVS bridge, port or host interface winnet creates. Linux limits
// interface names to 15 bytes and OVS for Windows names its internal ports after them, so winnet
// keeps names within that limit and to characters both systems accept.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=15
// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
type InterfaceName string
